"""NCCL's device memory per GPU (simulator/memory/nccl.py): buffer sizes from NCCL's source, channel counts, the
communicators of a plan, hand-checked bytes, the device peak, and the 2x H200 measurement."""

import pytest

from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS
from simulator.hardware.loader import load_cluster
from simulator.memory import estimate_memory
from simulator.memory.nccl import (
    COMM_EXTRA_BYTES,
    INTRA_CHANNELS,
    LL128_BUFF_BYTES,
    LL_BUFF_BYTES,
    NET_CHANNELS_PER_NIC,
    PROCESS_BYTES,
    Communicator,
    NcclFabric,
    communicator_bytes,
    nccl_bytes,
    net_connection_bytes,
    nvls_bytes,
    p2p_channels,
    p2p_connection_bytes,
    plan_communicators,
)
from simulator.model import ModelSpec
from simulator.plan import resolve_plan
from simulator.units.constants import MiB
from simulator.validation.nccl_memory import nccl_rows

GPT = ModelSpec(layers=8, hidden=1024, heads=16, vocab=50304)


def test_buffer_sizes_are_nccls_defaults():
    """src/init.cc DEFAULT_LL_BUFFSIZE / DEFAULT_LL128_BUFFSIZE (v2.28.9-1): 512 KiB and 4.6875 MiB."""
    assert LL_BUFF_BYTES == 512 * 1024
    assert LL128_BUFF_BYTES == 4915200 == 4.6875 * MiB


def test_a_connection_pair_is_12_mib_read_or_write_and_20_over_the_network():
    # read: send 4 KiB + 4 MiB -> 6 MiB, receive 4 KiB + 512 KiB + 4.6875 MiB -> 6 MiB
    # write: send 4 KiB -> 2 MiB, receive 4 KiB + 9.1875 MiB -> 10 MiB
    assert p2p_connection_bytes(read=True) == p2p_connection_bytes(read=False) == 12 * MiB
    # GDR: send LL128 + SIMPLE 8.6875 -> 10 MiB, receive LL + LL128 + SIMPLE 9.1875 -> 10 MiB
    assert net_connection_bytes() == 20 * MiB


def test_channel_counts_are_the_collective_models():
    """The copies in simulator/memory/nccl.py (memory may not import collectives) equal the coefficients."""
    assert INTRA_CHANNELS == DEFAULT_COEFFICIENTS.intra_channels
    assert NET_CHANNELS_PER_NIC == DEFAULT_COEFFICIENTS.net_channels_per_nic


def test_p2p_channels():
    h200 = NcclFabric.of(load_cluster("h200_x2"))
    assert h200 == NcclFabric("nvlink", 18, 2, 0, nvls=9, host_gpus=2)
    # 24 collective channels -> p2pnChannels 32; a peer over 18 NVLinks would take 36: 24 -> pow2 32
    assert p2p_channels(Communicator("tp", 2, 1, 2), h200) == (32, 32)
    dgx = NcclFabric.of(load_cluster("dgx_h100", nodes=4))
    assert dgx.nics_per_domain == 8
    # one GPU per node: 1 NIC, 2 channels; 2 per network peer
    assert p2p_channels(Communicator("pp", 4, 4, 1, peers=2, remote=2), dgx) == (2, 2)
    # 8 local ranks per node over 4 nodes: 16 channels; 2 per peer, 1 once 2 x ranks > 4 x 16
    assert p2p_channels(Communicator("ep", 32, 4, 8), dgx) == (16, 2)
    assert p2p_channels(Communicator("ep", 64, 8, 8), dgx) == (16, 1)


def test_communicator_bytes_by_hand():
    h200 = NcclFabric.of(load_cluster("h200_x2"))
    init = COMM_EXTRA_BYTES + 3 * 2 * MiB * 32                       # 198 MiB
    assert init == 198 * MiB
    assert communicator_bytes(Communicator("tp", 2, 1, 2, ring=True), h200) == init + 24 * 12 * MiB      # 486
    assert communicator_bytes(Communicator("ep", 2, 1, 2, peers=1), h200) == init + 32 * 12 * MiB        # 582
    assert communicator_bytes(Communicator("solo", 1, 1, 1, ring=True), h200) == 0
    dgx = NcclFabric.of(load_cluster("dgx_h100", nodes=2))
    # DP over 2 nodes with one GPU each: 2 channels, every hop over the network
    dp = Communicator("dp", 2, 2, 1, ring=True)
    assert communicator_bytes(dp, dgx) == COMM_EXTRA_BYTES + 3 * 2 * MiB * 2 + 2 * 20 * MiB
    # PP with one remote peer: the shared p2p pool, 2 x p2pnChannels x 16 steps x 128 KiB
    pp = Communicator("pp", 2, 2, 1, peers=1, remote=1)
    assert communicator_bytes(pp, dgx) == COMM_EXTRA_BYTES + 3 * 2 * MiB * 2 + 2 * 2 * 16 * 128 * 1024


def test_a_small_plan_by_hand():
    """TP 2 x PP 2 x DP 2 on one DGX H100 (8 GPUs on one node, order tp-cp-ep-dp-pp): stage 0 holds TP (2 ranks,
    ring), DP (2, ring), PP (1 peer) and the world (8, ring); every communicator has 32 channels at init; TP and
    DP also hold NVLS buffers for their 2 GPUs (16 channels x 2 x 1 MiB x 2 heads + a 2 MiB credit granule)."""
    cluster = load_cluster("dgx_h100")
    rp = resolve_plan(GPT, {"tp": 2, "pp": 2}, {"seq_len": 1024, "micro_batch": 1, "global_batch": 8}, 8)
    comms = plan_communicators(rp, 0, cluster.domain_gpus)
    assert [c.name for c in comms] == ["tp", "dp", "pp", "world"]
    assert [c.nvls for c in comms] == [True, True, False, False]
    init = 198 * MiB
    nvls = 16 * 2 * MiB * 2 + 2 * MiB
    expected = PROCESS_BYTES + (init + 24 * 12 * MiB) * 3 + init + 32 * 12 * MiB + 2 * nvls
    assert nccl_bytes(rp, cluster, 0).total == expected == (354 + 3 * 486 + 582 + 2 * 66) * MiB
    report = estimate_memory(rp, hbm_capacity_bytes=80e9, cluster=cluster)
    assert report.nccl_bytes == expected
    assert report.device_peak_bytes == pytest.approx(max(s.peak for s in report.stages) + expected
                                                      + report.runtime_bytes)
    assert report.to_dict()["nccl_bytes"] == expected
    assert estimate_memory(rp).nccl_bytes == 0          # no cluster, no NCCL


def test_middle_pipeline_stages_talk_to_two_peers():
    per_node = load_cluster("dgx_h100", nodes=4).domain_gpus
    rp = resolve_plan(GPT, {"tp": 8, "pp": 4}, {"seq_len": 1024, "micro_batch": 1, "global_batch": 8}, 32)
    pp = {s: next(c for c in plan_communicators(rp, s, per_node) if c.name == "pp") for s in range(4)}
    assert [pp[s].peers for s in range(4)] == [1, 2, 2, 1]
    assert all(c.remote == c.peers for c in pp.values())


def test_the_2x_h200_measurement():
    """The fitted steps reproduce the measurement; the all-to-all is a lower bound 62 MiB (14%) under it."""
    rows = {r["after"]: r for r in nccl_rows()}
    assert rows["all_reduce"]["predicted_MiB"] == rows["all_reduce"]["measured_MiB"] == 840
    second = rows["second communicator all_reduce"]
    assert second["step_predicted_MiB"] == second["step_measured_MiB"] == 486
    a2a = rows["all_to_all"]
    assert (a2a["step_predicted_MiB"], a2a["step_measured_MiB"]) == (384, 446)     # gap 62 MiB, not modelled
    assert a2a["predicted_MiB"] <= a2a["measured_MiB"]


def test_dual_schedules_communicators():
    """DualPipe: the ranks of stage s and pp-1-s, which hold the same two stages, all-reduce their gradients on a
    2-rank communicator (traffic.step's 'DualPipe copy gradients'); DualPipeV ends its V on rank 0, beside the
    embedding, so a tied embedding needs no sync communicator; 1F1B keeps it between the end stages."""
    tied = GPT.model_copy(update={"tied_embeddings": True})
    train = {"seq_len": 1024, "micro_batch": 1, "global_batch": 8}

    def names(schedule: str, stage: int) -> list[str]:
        rp = resolve_plan(tied, {"tp": 2, "pp": 4, "schedule": schedule}, train, 8)
        return [c.name for c in plan_communicators(rp, stage, 8)]

    assert names("1f1b", 0) == ["tp", "pp", "embedding", "world"]
    assert names("dualpipe", 0) == ["tp", "pp", "embedding", "pp_mirror", "world"]
    assert names("dualpipe", 1) == ["tp", "pp", "pp_mirror", "world"]
    assert names("dualpipev", 0) == ["tp", "pp", "world"]
    rp = resolve_plan(tied, {"tp": 2, "pp": 4, "schedule": "dualpipe"}, train, 8)
    mirror = next(c for c in plan_communicators(rp, 1, 8) if c.name == "pp_mirror")
    assert (mirror.ranks, mirror.domains, mirror.ring) == (2, 1, True)


def test_nvls_buffers_by_hand():
    """NVIDIA/nccl v2.28.9-1 src/transport/nvls.cc: nvlsChannels x 2 x NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8 x
    nHeads, plus a credit buffer (channels x 2 x 64 B x heads) in one 2 MiB granule."""
    hopper = NcclFabric.of(load_cluster("dgx_h100", nodes=2))
    assert (hopper.nvls, hopper.host_gpus) == (9, 8)
    tp8 = Communicator("tp", 8, 1, 8, ring=True, nvls=True)
    # 16 (NVLS_NCHANNELS_SM90) x 2 x 1 MiB x 8 heads = 256 MiB: the "nvlsTotalSize 268435456" NCCL logs on 8 H100s
    assert nvls_bytes(tp8, hopper) == 256 * MiB + 2 * MiB
    assert communicator_bytes(tp8, hopper) == COMM_EXTRA_BYTES + 3 * 2 * MiB * 32 + 24 * 12 * MiB + 258 * MiB
    assert nvls_bytes(Communicator("tp", 4, 1, 4, ring=True, nvls=True), hopper) == 128 * MiB + 2 * MiB
    # one GPU of the communicator per node: nothing to reduce in the switch
    assert nvls_bytes(Communicator("dp", 2, 2, 1, ring=True, nvls=True), hopper) == 0
    # no NVLS on an A100 NVSwitch (gen 2) nor where the scenario turns it off (system.nvls: false)
    assert nvls_bytes(tp8, NcclFabric.of(load_cluster("dgx_a100_80gb"))) == 0
    assert nvls_bytes(tp8, NcclFabric("nvlink", 18, 8, 8, nvls=0, host_gpus=8)) == 0
    # Blackwell: 24 channels inside one host (NVLS_NCHANNELS_SM100_NVL), 32 across hosts (NVLS_NCHANNELS_SM100)
    nvl72 = NcclFabric.of(load_cluster("gb200_nvl72", nodes=18))
    assert (nvl72.nvls, nvl72.host_gpus, nvl72.domain_gpus) == (10, 4, 72)
    assert nvls_bytes(Communicator("tp", 4, 1, 4, ring=True, nvls=True), nvl72) == 24 * 2 * MiB * 4 + 2 * MiB
    assert nvls_bytes(Communicator("tp", 8, 1, 8, ring=True, nvls=True), nvl72) == 32 * 2 * MiB * 8 + 2 * MiB


def test_which_communicators_pick_nvls():
    """Those that all-reduce large messages with two GPUs or more in the domain (NVLS inside it, NVLS-tree across
    domains): DDP's gradients and TP without sequence parallelism yes; the distributed optimizer's reduce-scatter,
    TP with sequence parallelism and the world's barrier no. As the collective model prices them on Hopper."""
    cluster = load_cluster("dgx_h100", nodes=2)
    train = {"seq_len": 1024, "micro_batch": 1, "global_batch": 16}

    def comms(**parallel):
        rp = resolve_plan(GPT, {"tp": 8, **parallel}, train, 16)
        return {c.name: c for c in plan_communicators(rp, 0, cluster.domain_gpus)}

    ddp = comms()
    assert (ddp["tp"].nvls, ddp["dp"].nvls, ddp["world"].nvls) == (True, False, False)
    assert comms(sp=True)["tp"].nvls is False
    assert ddp["dp"].local == 1                      # tp 8 fills the node: DP pairs GPUs of two nodes
    # tp 2, dp 8: DP over 2 nodes x 4 GPUs, an all-reduce across domains with 4 local GPUs -> NVLS-tree
    rp = resolve_plan(GPT, {"tp": 2}, train, 16)
    dp = next(c for c in plan_communicators(rp, 0, cluster.domain_gpus) if c.name == "dp")
    assert (dp.ranks, dp.domains, dp.local, dp.nvls) == (8, 2, 4, True)
    rp = resolve_plan(GPT, {"tp": 2, "distributed_optimizer": True}, train, 16)
    dp = next(c for c in plan_communicators(rp, 0, cluster.domain_gpus) if c.name == "dp")
    assert (dp.domains, dp.nvls) == (2, False)
    assert nccl_bytes(resolve_plan(GPT, {"tp": 2}, train, 16), cluster, 0).total \
        - nccl_bytes(rp, cluster, 0).total == 16 * 2 * MiB * 4 + 2 * MiB


def test_the_collective_model_picks_nvls_for_large_all_reduces_only():
    """What the rule above rests on: on DGX H100s the collective model prices a large all-reduce with NVLS (inside a
    node) or NVLS-tree (across nodes), and reduce-scatter / all-gather with rings."""
    import numpy as np

    from simulator.collectives.model import build_cost_model, evaluate
    from simulator.collectives.place import place_group
    from simulator.topology import Topology

    topology = Topology(load_cluster("dgx_h100", nodes=2))
    sizes = np.array([8e6, 64e6, 512e6])
    for gpus, algorithm in ((range(8), "nvls"), (range(0, 16, 2), "nvls_tree")):
        model = build_cost_model(place_group(topology, list(gpus)))
        assert set(evaluate(model, "all_reduce", sizes).algorithms) == {algorithm}
        for op in ("reduce_scatter", "all_gather"):
            assert set(evaluate(model, op, sizes).algorithms) == {"ring"}


def test_system_nvls_false_removes_the_nvls_buffers():
    """scenarios/search_llama3_8b_h100.yaml runs tp 1 x dp 16 on two DGX H100s: its DDP all-reduce spans both nodes
    with 8 GPUs in each (NVLS-tree, 256 MiB + 2 MiB); ``system.nvls: false`` (NCCL_NVLS_ENABLE=0) takes them away."""
    from pathlib import Path

    from simulator import load_scenario, simulate
    from simulator.scenario.document import read_document

    data = read_document(Path(__file__).resolve().parents[2] / "scenarios" / "search_llama3_8b_h100.yaml").data
    data.pop("search")
    on = simulate(load_scenario(data)).to_dict()["memory"]
    off = simulate(load_scenario({**data, "system": {**data["system"], "nvls": False}})).to_dict()["memory"]
    assert on["nccl_bytes"] - off["nccl_bytes"] == 258 * MiB
    assert on["device_peak_bytes"] - off["device_peak_bytes"] == 258 * MiB
