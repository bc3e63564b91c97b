"""Blackwell profiles and the multi-node NVLink domain (GB200 NVL72): datasheet peaks, rack topology, placement.

Datasheet figures (NVIDIA HGX B200 datasheet: per 8 GPUs; GB200 NVL72 datasheet: per GB200 superchip = 2 GPUs) are
quoted "with sparsity"; dense per GPU = figure / GPUs / 2.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.collectives import build_cost_model, evaluate, place_group
from simulator.errors import UserError
from simulator.hardware import load_cluster, load_gpu, load_node
from simulator.topology import Topology
from simulator.units import GB, MiB

SPARSE = 2.0
HGX_B200 = {"fp4": 144e15, "fp8": 72e15, "fp6": 72e15, "int8": 72e15, "bf16": 36e15, "fp16": 36e15, "tf32": 18e15}
GB200_SUPERCHIP = {"fp4": 40e15, "fp8": 20e15, "fp6": 20e15, "int8": 20e15, "bf16": 10e15, "fp16": 10e15, "tf32": 5e15}


@pytest.mark.parametrize(("gpu", "table", "gpus"), [("b200_sxm", HGX_B200, 8), ("gb200", GB200_SUPERCHIP, 2)])
def test_derived_dense_peaks_equal_the_datasheet_within_1_percent(gpu, table, gpus):
    spec = load_gpu(gpu)
    for dtype, sparse in table.items():
        assert spec.dense_peak_flops(dtype) == pytest.approx(sparse / gpus / SPARSE, rel=0.01), dtype
        assert spec.sparse_peak_flops(dtype) == pytest.approx(sparse / gpus, rel=0.01), dtype


@pytest.mark.parametrize(("gpu", "hbm", "datasheet"), [("b200_sxm", 183359 * MiB, 180 * GB),
                                                      ("gb200", 189471 * MiB, 186 * GB)])
def test_memory_and_nvlink5(gpu, hbm, datasheet):
    """Capacity as nvidia-smi reports it (B200: NVIDIA/TensorRT-LLM#10278), the datasheet's rounded figure beside it."""
    spec = load_gpu(gpu)
    assert spec.memory.kind == "HBM3e" and spec.memory.capacity == hbm and spec.memory.bandwidth == 8000 * GB
    assert spec.memory.datasheet_capacity == datasheet and "nvidia-smi" in spec.memory.capacity_source
    assert spec.nvlink.generation == 5 and spec.nvlink.links == 18
    assert 2 * spec.nvlink.total_Bps == 1800 * GB  # 1.8 TB/s bidirectional
    assert spec.compute_capability_version == (10, 0) and spec.architecture == "blackwell"


def test_gb200_nvl72_rack_layout():
    tray = load_node("gb200_nvl72")
    assert tray.gpus == 4 and tray.cpu.sockets == 2 and tray.nics.count == 4  # one NIC per GPU
    assert tray.nvlink_domain.nodes == 18 and tray.nvlink_domain.switch_trays == 9
    assert tray.nvswitch.count == 18 and tray.nvswitch.links_per_gpu == [1] * 18 and tray.nvswitch.nvls
    assert tray.c2c.bandwidth == 450 * GB  # NVLink-C2C 900 GB/s bidirectional
    rack = load_cluster("gb200_nvl72", 18)
    assert (rack.gpus, rack.domain_gpus, rack.domains) == (72, 72, 1)
    assert load_cluster("gb200_nvl72", 36).domains == 2
    assert load_cluster("hgx_b200", 4).domain_gpus == 8  # no nvlink_domain: the domain is the node


def test_a_cluster_must_fill_whole_racks():
    with pytest.raises(UserError, match="whole NVLink domains"):
        load_cluster("gb200_nvl72", 20)
    assert load_cluster("gb200_nvl72", 9).domain_nodes == 9  # half a rack is one domain of 36 GPUs


@pytest.fixture(scope="module")
def two_racks():
    return Topology(load_cluster("gb200_nvl72", 36))


def test_every_pair_of_a_rack_is_one_switch_hop_at_the_datasheet_bandwidth(two_racks):
    """All 72 x 71 / 2 pairs of each rack: both GPUs link to the same 18 switch chips at 50 GB/s each (so every pair
    is GPU -> switch -> GPU, 18 parallel routes, 900 GB/s per direction) and to no GPU directly; the path query
    agrees on a sample of pairs."""
    graph = two_racks.graph
    for rack in (0, 1):
        gpus = two_racks.gpus_of_domain(rack)
        switches = {f"d{rack}.nvsw{i}" for i in range(18)}
        assert len(gpus) == 72
        for g in gpus:
            nvlink = {v for v in graph.successors(g) if graph.edges[g, v]["link"] == "nvlink"}
            assert nvlink == switches
            assert all(graph.edges[g, s]["bandwidth_Bps"] == 50 * GB == graph.edges[s, g]["bandwidth_Bps"]
                       for s in switches)
        for s in switches:
            assert {v for v in graph.successors(s) if graph.nodes[v]["kind"] == "gpu"} == set(gpus)
    for a, b in list(itertools.combinations(two_racks.gpus_of_domain(0), 2))[::97]:
        paths = two_racks.paths(a, b)
        assert len(paths) == 18 and sum(p.bottleneck_Bps for p in paths) == pytest.approx(900 * GB)
        assert all(len(p.hops) == 3 and p.transport == "nvlink" and p.hops[1] in graph for p in paths)


@pytest.mark.parametrize(("a", "b"), [("n0.gpu0", "n0.gpu1"), ("n0.gpu0", "n17.gpu3"), ("n18.gpu2", "n30.gpu1")])
def test_pair_max_flow_inside_a_rack_is_900_GBps(two_racks, a, b):
    assert two_racks.pair_bandwidth(a, b) == pytest.approx(900 * GB)


def test_a_pair_in_two_racks_goes_through_the_nics(two_racks):
    path = two_racks.path("n0.gpu0", "n18.gpu0")
    assert path.transport == "network" and "ib" in path.links
    assert "n0.nic0" in path.hops and "n18.nic0" in path.hops
    assert path.bottleneck_Bps == pytest.approx(400e9 / 8)  # one ConnectX-7 at 400 Gb/s
    assert len(two_racks.nvlink_domain("n0.gpu0")) == 72


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 143), st.integers(0, 143))
def test_transport_follows_the_rack(a, b):
    topology = _two_racks()
    if a == b:
        return
    same_rack = a // 72 == b // 72
    path = topology.path(a, b)
    assert path.transport == ("nvlink" if same_rack else "network")
    assert (len(path.hops) == 3) == same_rack


_CACHE: dict = {}


def _two_racks() -> Topology:
    if "t" not in _CACHE:
        _CACHE["t"] = Topology(load_cluster("gb200_nvl72", 36))
    return _CACHE["t"]


def test_tp16_group_inside_one_rack_is_priced_on_nvlink_and_on_hgx_b200_on_the_network(two_racks):
    rack_group = place_group(two_racks, list(range(16)))
    assert rack_group.n_nodes == 1 and rack_group.ranks_per_node == 16
    assert rack_group.intra_transport == "nvlink" and rack_group.nvls and rack_group.gpu_arch == "sm100"
    ev = evaluate(build_cost_model(rack_group), "all_reduce", np.array([2.0**30]))
    assert ev.algorithms[0] == "nvls"

    hgx = place_group(Topology(load_cluster("hgx_b200", 2)), list(range(16)))
    assert hgx.n_nodes == 2 and hgx.ranks_per_node == 8 and hgx.nics_per_node == 8
    slow = evaluate(build_cost_model(hgx), "all_reduce", np.array([2.0**30]))
    assert slow.algorithms[0] == "nvls_tree" and slow.times_s[0] > ev.times_s[0]


def test_a_group_spanning_racks_uses_every_nic_of_its_racks(two_racks):
    group = place_group(two_racks, list(range(144)))
    assert group.n_nodes == 2 and group.ranks_per_node == 72 and group.nics_per_node == 72


def _scenario(profile: str, nodes: int, parallel: dict, model: str, gpus: int | None = None):
    system = {"profile": profile, "nodes": nodes, **({"gpus": gpus} if gpus else {})}
    return simulator.simulate(simulator.load_scenario({
        "system": system, "model": {"preset": model},
        "parallel": {"recompute": "full", "distributed_optimizer": True, **parallel},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "precision": "bf16"}}))


def _links(result, dim: str) -> set[str]:
    return {c["link"] for c in result.to_dict()["comm"] if c["dim"] == dim}


def test_tp16_training_step_on_nvl72_stays_on_nvlink_and_leaves_it_on_hgx_b200():
    plan = {"tp": 16, "sp": True, "pp": 1, "dp": 4}
    rack = _scenario("gb200_nvl72", 18, plan, "llama3-70b", gpus=64)
    assert _links(rack, "tp") == {"nvlink"}
    assert not any("leaves the NVLink domain" in w for w in rack.warnings())
    hgx = _scenario("hgx_b200", 8, plan, "llama3-70b")
    assert _links(hgx, "tp") == {"ib"}
    assert any("TP group leaves the NVLink domain" in w for w in hgx.warnings())
    # two nodes: the ring crosses 8 NICs per node (NCCL channels 16 x 20.6 GB/s = 330 GB/s) against ~720 GB/s of
    # NVLink per GPU in the rack: each TP collective ~2x slower, part of it hidden behind compute
    assert hgx.step.exposed_comm_s["tp"] > 1.5 * rack.step.exposed_comm_s["tp"]


def test_ep64_inside_one_rack_is_nvlink_and_rdma_on_hgx_b200():
    plan = {"ep": 64, "dp": 64}
    rack = _scenario("gb200_nvl72", 18, plan, "gpt-oss-120b", gpus=64)
    assert _links(rack, "ep") == {"nvlink"}
    hgx = _scenario("hgx_b200", 8, plan, "gpt-oss-120b")
    assert _links(hgx, "ep") == {"rdma"}


def test_nvls_on_a_72_gpu_rack_uses_32_channels_and_no_nvls_all_gather():
    """NCCL (src/graph/search.cc, src/include/device.h NCCL_MAX_NVLS_ARITY = 32): the NVLS graph of a 72-GPU domain
    has 32 channels, so the all_reduce bus bandwidth is 2 x B x nvlsEfficiency x (32-1)/(32+1) with
    B = 18 links x 40.1 GB/s (NCCL's Blackwell NVLink rate) = 721.8 GB/s and efficiency 0.74: 1003.5 GB/s;
    all_gather / reduce_scatter run NVLS only up to 32 local ranks. At 64 GiB the time is 25 us + (S + 2 loops of
    24 channels x 32 heads x 128 KiB) x (2 x 71/72) / 1003.5 GB/s (the pipeline fill, see the next test)."""
    model = build_cost_model(place_group(_two_racks(), list(range(72))))
    size = 2.0**36
    ev = evaluate(model, "all_reduce", np.array([size]), "nvls")
    bus = 2 * 721.8e9 * 0.74 * 31 / 33
    assert ev.times_s[0] == pytest.approx(25e-6 + (size + 2 * 24 * 32 * 2**17) * (2 * 71 / 72) / bus, rel=1e-4)
    with pytest.raises(UserError, match="at most 32 ranks"):
        evaluate(model, "all_gather", np.array([size]), "nvls")
    small = build_cost_model(place_group(_two_racks(), list(range(32))))
    assert evaluate(small, "all_gather", np.array([size]), "nvls").times_s[0] > 0


@pytest.mark.parametrize("size, chunk, busbw", [(2**29, 2**16, 828.5e9), (2**32, 2**16, 977.7e9),
                                                (2**33, 2**17, 979.1e9)])
def test_nvls_all_reduce_on_a_rack_pays_two_loops_of_pipeline_fill(size, chunk, busbw):
    """NCCL v2.30.7 on one 72-GPU NVLink domain: the NVLS kernel runs 24 channels (nvls.cc NVLS_NCHANNELS_SM100_NVL)
    over 32 heads (search.cc), and enqueue.cc picks the chunk from concurrentOps = 24 x 32 = 768: 128 KiB from
    64 x 768 x 128 KiB = 6 GiB up, 64 KiB from 8 x 768 x 64 KiB = 384 MiB up. One loop moves 768 chunks; the
    scatter -> reduce/multicast -> gather pipeline fills and drains one loop each (the model's assumption), so
    t = 25 us + (S + 2 x 768 x chunk) x (142/72) / 1003.5 GB/s. Hand numbers: 512 MiB + 96 MiB -> 828.5 GB/s busbw,
    4 GiB + 96 MiB -> 977.7, 8 GiB + 192 MiB -> 979.1: flat from 4 to 8 GiB, as coreweave/nccl-tests#43 measured
    (839.16 / 834.57 GB/s), but still 16-17% above it (docs/collectives.md)."""
    model = build_cost_model(place_group(_two_racks(), list(range(72))))
    t = evaluate(model, "all_reduce", np.array([float(size)])).times_s[0]
    w, bus = 2 * 71 / 72, 2 * 721.8e9 * 0.74 * 31 / 33
    assert t == pytest.approx(25e-6 + (size + 2 * 768 * chunk) * w / bus, rel=1e-4)
    assert size / t * w == pytest.approx(busbw, rel=5e-4)


def test_nvls_loop_bytes_follow_nccls_chunk_steps():
    """enqueue.cc NVLS chunk: 128 KiB, 64 KiB below 64 ops x 128 KiB, 32 KiB below 8 ops x 64 KiB, 16 KiB below
    2 ops x 32 KiB (ops = channels x heads: 16 x 8 = 128 on DGX H100; 24 x 32 = 768 on a 72-GPU rack)."""
    from simulator.collectives.algorithms import nvls_loop_bytes

    sizes = [2**30, 2**30 - 1, 2**26, 2**26 - 1, 2**23, 2**23 - 1]
    assert list(nvls_loop_bytes(sizes, 128, 2**17)) == [128 * c for c in (2**17, 2**16, 2**16, 2**15, 2**15, 2**14)]
    assert list(nvls_loop_bytes([6 * 2**30, 2**32, 384 * 2**20, 2**28, 2**24], 768, 2**17)) == [
        768 * c for c in (2**17, 2**16, 2**16, 2**15, 2**14)]


def _llama70b(profile: str, nodes: int, precision: str):
    return simulator.simulate(simulator.load_scenario({
        "system": {"profile": profile, "nodes": nodes, "gpus": 64}, "model": {"preset": "llama3-70b"},
        "parallel": {"tp": 8, "sp": True, "recompute": "selective", "distributed_optimizer": True},
        "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 64, "precision": precision}}))


def test_fp4_recipe_runs_nvfp4_gemms_on_blackwell_and_bf16_on_hopper():
    from simulator.plan import ParallelPlan, TrainingConfig, resolve_recipe

    r = resolve_recipe(ParallelPlan(), TrainingConfig(precision="fp4"))
    assert (r.gemm_dtype, r.param, r.main, r.activation, r.serve_param) == ("fp4", 2, 4, 2, 0.5625)
    assert r.gemm_dtype_on(load_gpu("b200_sxm").dtypes) == "fp4"
    assert r.gemm_dtype_on(load_gpu("h100_sxm5").dtypes) == "bf16"
    # Hopper has no fp4 tensor cores: the fp4 recipe is the bf16 step
    assert _llama70b("dgx_h100", 8, "fp4").step.step_s == _llama70b("dgx_h100", 8, "bf16").step.step_s
    # GB200: linear GEMMs at 10 / 5 PFLOP/s (x the same 0.684 fraction) -> fp4 compute below fp8's, memory as bf16
    bf16, fp8, fp4 = (_llama70b("gb200_nvl72", 18, p) for p in ("bf16", "fp8", "fp4"))
    assert fp4.step.compute_s < 0.75 * fp8.step.compute_s < 0.75 * bf16.step.compute_s
    assert fp4.memory.peak_bytes == bf16.memory.peak_bytes


def test_sixteen_trays_per_rack_make_64_gpu_domains():
    """system.nvlink_domain_nodes: 16 of a rack's 18 trays in use: an EP 64 group fills one rack's domain, and
    the next group the next rack's (with 18 trays per rack, EP group 1 would straddle two racks unevenly)."""
    cluster = load_cluster("gb200_nvl72", 32, domain_nodes=16)
    assert (cluster.domain_gpus, cluster.domains) == (64, 2)
    topology = Topology(cluster)
    second = place_group(topology, list(range(64, 128)))
    assert second.n_nodes == 1 and second.intra_transport == "nvlink" and second.nvls
    with pytest.raises(UserError, match="spread unevenly"):
        place_group(Topology(load_cluster("gb200_nvl72", 36)), list(range(64, 128)))
    with pytest.raises(UserError, match="2 to 18"):
        load_cluster("gb200_nvl72", 38, domain_nodes=19)
    with pytest.raises(UserError, match="no multi-node NVLink domain"):
        load_cluster("hgx_b200", 2, domain_nodes=2)


def test_moe_cli_prices_ep64_on_a_rack_over_nvlink(capsys):
    import json

    from simulator.cli import main

    args = ["moe", "--ep", "64", "--tokens", "4096", "--hidden", "7168", "--top-k", "8", "--experts", "256", "--json"]
    assert main([*args[:1], "--system", "gb200_nvl72", "--nodes", "16", *args[1:]]) == 0
    rack = json.loads(capsys.readouterr().out)
    assert main([*args[:1], "--system", "hgx_b200", "--nodes", "8", *args[1:]]) == 0
    hgx = json.loads(capsys.readouterr().out)
    assert (rack["bottleneck"], hgx["bottleneck"]) == ("nvlink", "rdma")
    assert rack["dispatch_us"] < hgx["dispatch_us"] / 5
