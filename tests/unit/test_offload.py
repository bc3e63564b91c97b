"""Offload as plan knobs (issue 30 item 2, docs/offload.md): memory on the GPU and the host, the step-time cost on
the topology's host link and the node's CPU, the rules (exit 2), and the search's offload choices. Every number is
worked by hand from the hardware profiles' datasheet figures and data/offload.yaml."""

import pytest

from simulator import load_scenario, simulate
from simulator.errors import UserError
from simulator.hardware.loader import load_cluster
from simulator.memory.offload import check_host_memory, host_bytes
from simulator.model import ModelSpec
from simulator.plan import resolve_plan
from simulator.plan.offload import Offload
from simulator.plan.recipe import resolve_recipe
from simulator.pricing.offload import HostRates, activation_offload_s, optimizer_offload, param_fetch_s
from simulator.scenario.document import read_document
from simulator.scenario.load import fixed_parts
from simulator.search.space import offload_choices
from simulator.topology import topology_of
from simulator.topology.host import host_link_Bps

GB = 1e9
PCIE4_X16 = 16 * 16e9 * 128 / 130 / 8            # 31.5077 GB/s per direction
PCIE5_X16 = 2 * PCIE4_X16                        # 63.0154 GB/s
HOST_COPY = 0.88                                 # data/offload.yaml host_copy_efficiency
CPU_EFF = 0.12                                   # data/offload.yaml cpu_optimizer_efficiency

#: a 13B-class GPT (40 layers, h 5120), the ZeRO-Offload paper's headline size (Ren et al. 2021: 13B on one GPU)
GPT13B = {"layers": 40, "hidden": 5120, "heads": 40, "vocab": 50304}
ONE_A100 = {"profile": "dgx_a100_80gb", "nodes": 1, "gpus": 1}
TRAINING = {"seq_len": 1024, "micro_batch": 16, "global_batch": 16, "precision": "bf16", "framework": "pytorch"}


def _run(parallel):
    return simulate(load_scenario({"system": ONE_A100, "model": GPT13B, "training": TRAINING,
                                   "parallel": {"recompute": "full", **parallel}}))


def test_host_link_is_shared_by_the_gpus_behind_one_uplink():
    """DGX H100: two GPUs per PCIe Gen5 switch share its x16 uplink (63.0 / 2 GB/s); one GPU alone has it all;
    DGX A100: Gen4 (31.5 / 2); GB200: each GPU's own NVLink-C2C, 450 GB/s."""
    h100 = topology_of(load_cluster("dgx_h100"))
    assert host_link_Bps(h100) == pytest.approx(PCIE5_X16 / 2, rel=1e-12)
    assert host_link_Bps(h100, 1) == pytest.approx(PCIE5_X16, rel=1e-12)
    assert host_link_Bps(topology_of(load_cluster("dgx_a100_80gb"))) == pytest.approx(PCIE4_X16 / 2, rel=1e-12)
    assert host_link_Bps(topology_of(load_cluster("gb200_nvl72"))) == 450 * GB


def test_offload_is_the_only_way_13b_fits_on_one_a100_80gb():
    """n = 13,098,854,400 parameters with Adam in bf16: 16 B each (2 weights + 2 gradients + 4 master + 8 moments)
    = 209.6 GB on one GPU, whatever the ZeRO stage (one rank: nothing to shard), so every plan runs out of the
    80 GB. ZeRO-Offload (zero 2, offload_optimizer cpu) keeps only the 2 B weights on the GPU (26.2 GB) and
    16 B per parameter on the host (4 master + 8 moments + 4 fp32 gradient: 209.6 GB of the node's 2 TB).

    Its cost, by hand, for one step of 16 x 1024 tokens in one micro-batch (one GPU alone on its PCIe Gen4 x16
    link: B_h = 31.508 x 0.88 = 27.727 GB/s; the CPU step at 409.6 GB/s x 0.12 = 49.15 GB/s over 30 B per
    parameter):
    - CPU Adam: 13.0989e9 x 30 / 49.152e9 = 7.9949 s, in the optimizer's time;
    - gradients down in fp32, 4 B each: 52.40 GB / 27.727 GB/s = 1.8897 s under the backward (longer), hidden;
    - bf16 parameters up after the step: 26.198 GB / 27.727 GB/s = 0.94485 s exposed: the breakdown's offload."""
    n = 13_098_854_400
    for zero in (0, 1, 2, 3):
        assert _run({"zero": zero}).memory.oom
    r = _run({"zero": 2, "optimizer_cpu_offload": True})
    assert not r.memory.oom
    stage = r.memory.stages[0]
    assert stage.bucket("weights") == 2 * n
    assert stage.bucket("gradients") == stage.bucket("main_params") == stage.bucket("optimizer") == 0.0
    assert host_bytes(r.scenario.plan, 0) == (16 * n, 0.0)
    memory = r.to_dict()["memory"]
    assert (memory["host_offload_bytes"], memory["nvme_offload_bytes"]) == (16 * n, 0.0)
    assert memory["host_capacity_bytes"] == 2e12
    link = PCIE4_X16 * HOST_COPY
    cpu_s = n * 30 / (409.6e9 * CPU_EFF)
    assert cpu_s == pytest.approx(7.9949, rel=1e-5)
    assert 4 * n / link == pytest.approx(1.8897, rel=1e-4)
    assert 2 * n / link == pytest.approx(0.94485, rel=1e-5)
    assert r.step.offload_s == pytest.approx(2 * n / link, rel=1e-9)
    # the same step without offload (out of memory, but timed): its GPU optimizer streams n x (update + 2 B of
    # gradient zeroing) at one HBM rate; with offload the GPU only zeroes its n x 2 B gradients
    plain = _run({"zero": 2})
    update = plain.scenario.plan.recipe.optimizer_update_bytes
    gpu_zeroing = plain.step.optimizer_s * 2 / (update + 2)
    assert r.step.optimizer_s == pytest.approx(cpu_s + gpu_zeroing, rel=1e-9)
    assert r.step.step_s == pytest.approx(plain.step.step_s - plain.step.optimizer_s + cpu_s + gpu_zeroing
                                          + 2 * n / link, rel=1e-9)


RATES = HostRates(link_Bps=25 * GB, cpu_Bps=50 * GB)


@pytest.mark.parametrize("overlap, copy_s", [(False, 0.16 + 0.08), (True, 0.6 - 0.6)])
def test_megatron_hybrid_optimizer_copies_in_turn_or_pipelined(overlap, copy_s):
    """Megatron HybridDeviceOptimizer, fraction 0.5 of 2e9 owned parameters (n = 1e9), fp32 main gradients (4 B),
    bf16 parameters: d2h 4 GB / 25 GB/s = 0.16 s, CPU 30 GB / 50 GB/s = 0.6 s, h2d 2 GB / 25 GB/s = 0.08 s; in
    turn the copies add 0.24 s, pipelined (--overlap-cpu-optimizer-d2h-h2d) the CPU step hides both."""
    rb = resolve_recipe(*_megatron_configs())
    assert (rb.grad, rb.param, rb.main, rb.moments) == (4, 2, 4, 8)
    off = Offload(optimizer_fraction=0.5, overlap_d2h_h2d=overlap)
    times = optimizer_offload(2e9, off, rb, RATES, micro_batches=8, backward_s=1.0)
    assert times.cpu_s == pytest.approx(0.6, rel=1e-12)
    assert times.copy_s == pytest.approx(copy_s, abs=1e-12)


def _megatron_configs():
    from simulator.plan.config import ParallelPlan, TrainingConfig

    return ParallelPlan(distributed_optimizer=True), TrainingConfig()


def test_zero_infinity_fetches_parameters_under_compute():
    """ZeRO-Infinity offload_param: 1e9 owned bf16 parameters come up before each forward and backward: 2 GB /
    25 GB/s = 0.08 s against forward 0.05 s (0.03 exposed) and backward 0.1 s (hidden), 4 micro-batches: 0.12 s;
    from NVMe at 8 x 7.0 GB/s / 8 GPUs = 7 GB/s: 0.2857 s, exposing 0.2357 + 0.1857 per micro-batch."""
    rb = resolve_recipe(*_pytorch_zero3())
    cpu = param_fetch_s(1e9, Offload(optimizer_fraction=1.0, param_device="cpu"), rb, RATES, 4, 0.05, 0.1)
    assert cpu == pytest.approx(4 * 0.03, rel=1e-9)
    rates = HostRates(25 * GB, 50 * GB, nvme_read_Bps=7 * GB, nvme_write_Bps=3.8 * GB)
    nvme = param_fetch_s(1e9, Offload(optimizer_fraction=1.0, param_device="nvme"), rb, rates, 4, 0.05, 0.1)
    fetch = 2e9 / 7e9
    assert nvme == pytest.approx(4 * ((fetch - 0.05) + (fetch - 0.1)), rel=1e-9)


def _pytorch_zero3():
    from simulator.plan.config import ParallelPlan, TrainingConfig

    return ParallelPlan(zero=3), TrainingConfig(framework="pytorch")


def test_activation_offload_exposes_what_the_copy_stream_cannot_hide():
    """Megatron activation offload, 6 of 12 layers, 0.5 GB saved per layer: c = 0.02 s each way at 25 GB/s, a
    layer's forward f = 0.12 / 12 = 0.01 s, backward b = 0.24 / 12 = 0.02 s. Down: copy i ends at f + i c and must
    end before layer 12 - 6 + i starts at (12 - 6 + i - 1) f: the sixth is 0.13 - 0.11 = 0.02 s late (the first is
    early: 0.03 - 0.06). Up: each reload 0.02 s under a 0.02 s backward, hidden. 2 micro-batches: 0.04 s; with
    f = 0.03 s (forward 0.36 s) the stream keeps up: 0."""
    assert activation_offload_s(0.5 * GB, 12, 6, RATES, 2, 0.12, 0.24) == pytest.approx(0.04, rel=1e-9)
    assert activation_offload_s(0.5 * GB, 12, 6, RATES, 2, 0.36, 0.24) == 0.0
    assert activation_offload_s(0.5 * GB, 12, 0, RATES, 2, 0.12, 0.24) == 0.0


def test_activation_offload_now_costs_time_on_the_host_link():
    """The existing key (memory only before) now adds its exposed copies: with a layer's copy slower than its
    compute the breakdown's offload is positive and the step grows by it."""
    scenario = {"system": {"profile": "dgx_h100", "nodes": 1, "gpus": 1},
                "model": {"layers": 8, "hidden": 4096, "heads": 32, "vocab": 50304},
                "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 2}}
    plain = simulate(load_scenario({**scenario, "parallel": {}}))
    offloaded = simulate(load_scenario({**scenario, "parallel": {"cpu_offloading_num_layers": 4}}))
    assert offloaded.step.offload_s > 0
    assert offloaded.step.step_s == pytest.approx(plain.step.step_s + offloaded.step.offload_s, rel=1e-9)
    unknown_host = {**scenario, "system": {"profile": "h200_x2", "nodes": 1, "gpus": 1}}   # no cpu.memory_* fields
    assert simulate(load_scenario({**unknown_host, "parallel": {"cpu_offloading_num_layers": 4}})).step.offload_s > 0


@pytest.mark.parametrize("parallel, training, key, rule", [
    ({"optimizer_offload_fraction": 0.5}, {}, "parallel.optimizer_offload_fraction", "only applies"),
    ({"optimizer_cpu_offload": True}, {}, "parallel.optimizer_cpu_offload", "distributed_optimizer"),
    ({"optimizer_cpu_offload": True}, {"framework": "pytorch"}, "parallel.optimizer_cpu_offload", "zero 1, 2 or 3"),
    ({"optimizer_cpu_offload": True, "zero": 2}, {"framework": "pytorch", "optimizer": "sgd"},
     "parallel.optimizer_cpu_offload", "optimizer adam"),
    ({"optimizer_cpu_offload": True, "zero": 2, "offload_param": "cpu"}, {"framework": "pytorch"},
     "parallel.offload_param", "zero 3"),
    ({"optimizer_cpu_offload": True, "zero": 2, "overlap_cpu_optimizer_d2h_h2d": True}, {"framework": "pytorch"},
     "parallel.overlap_cpu_optimizer_d2h_h2d", "framework megatron"),
])
def test_rules_refuse_what_the_frameworks_refuse(parallel, training, key, rule):
    with pytest.raises(UserError, match=rule) as err:
        resolve_plan(ModelSpec(layers=4, hidden=1024, heads=16, vocab=50304), {"dp": 2} | parallel,
                     {"global_batch": 8} | training, 2)
    assert err.value.key_path == key


def test_host_memory_capacity_is_checked():
    """128.8e9 parameters (40 layers of 12 x 16384^2) over 8 GPUs of a DGX A100, optimizer offloaded: 16 B each on
    the host = 2,061 GB > the node's 2,000 GB."""
    model = ModelSpec(layers=40, hidden=16384, heads=128, vocab=50304)
    rp = resolve_plan(model, {"zero": 2, "optimizer_cpu_offload": True}, {"framework": "pytorch", "global_batch": 8},
                      8)
    with pytest.raises(UserError, match="host memory per node") as err:
        check_host_memory(rp, load_cluster("dgx_a100_80gb"))
    assert err.value.key_path == "parallel.optimizer_cpu_offload"
    with pytest.raises(UserError, match="cpu.memory_capacity"):
        check_host_memory(rp, load_cluster("h200_x2"))


def test_the_scenario_exits_2_on_a_bad_offload_key(tmp_path, capsys):
    from simulator.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text("system: {profile: dgx_h100, nodes: 1}\nmodel: {preset: gpt3-175b}\n"
                    "parallel: {tp: 8, optimizer_cpu_offload: true}\n")
    assert main(["run", str(path)]) == 2
    assert f"{path}:3: parallel.optimizer_cpu_offload: " in capsys.readouterr().err


def _fixed(profile, **training):
    return fixed_parts(read_document({"system": {"profile": profile, "nodes": 1}, "model": {"preset": "gpt3-175b"},
                                      "training": training}))


def test_offload_choices_follow_the_framework_and_the_node():
    """Megatron: the optimizer with its pipelined copies, and half of GPT-3's 96 layers' activations; the pytorch
    family: ZeRO-Offload and ZeRO-Infinity to the host and, on a node with drives, NVMe; a node profile without its
    host memory: none."""
    assert offload_choices(_fixed("dgx_h100")) == {
        "none": {}, "optimizer": {"optimizer_cpu_offload": True, "overlap_cpu_optimizer_d2h_h2d": True},
        "activations": {"cpu_offloading_num_layers": 48}}
    assert set(offload_choices(_fixed("dgx_h100", framework="pytorch"))) == {
        "none", "optimizer", "params_cpu", "params_nvme"}
    assert set(offload_choices(_fixed("hgx_h200", framework="pytorch"))) == {"none", "optimizer", "params_cpu"}
    assert offload_choices(_fixed("h200_x2")) == {"none": {}}


def test_a_search_finds_13b_on_one_a100_only_with_offload():
    """The search of the 13B case: without offload nothing fits and memory is named (196.7 GiB at least, on an
    80 GiB GPU); with ``optimizer_cpu_offload`` pinned, ZeRO 1-3 fit (zero 0 is refused: ZeRO-Offload needs a ZeRO
    stage) and the fast path's step equals ``simulate()``'s, offload included."""
    from simulator.search import search

    data = {"system": ONE_A100, "model": GPT13B, "training": TRAINING,
            "search": {"tp": [1], "vpp": [1], "schedule": ["1f1b"], "recompute": ["full"], "micro_batch": [16]}}
    with pytest.raises(UserError, match="out of memory"):
        search(data)
    result = search({**data, "parallel": {"optimizer_cpu_offload": True}})
    assert sorted(p["sharding"] for p in result.plans) == ["zero1", "zero2", "zero3"]
    zero2 = next(p for p in result.plans if p["sharding"] == "zero2")
    reference = _run({"zero": 2, "optimizer_cpu_offload": True}).step
    assert zero2["step_s"] == pytest.approx(reference.step_s, rel=1e-9)
    assert zero2["offload_s"] == pytest.approx(reference.offload_s, rel=1e-9)


def test_megatron_half_offload_on_a_dgx_h100_by_hand():
    """Megatron --optimizer-cpu-offload --optimizer-offload-fraction 0.5 with the distributed optimizer, 8 GPUs of a
    DGX H100 (dp 8): the owned shard keeps half its master weights and moments on the GPU (the gradient buffer stays
    whole); of the n = owned / 2 offloaded parameters the CPU steps n x 30 B at 614.4 GB/s x 0.12 / 8 GPUs, the fp32
    main gradients go down (4 B) and bf16 parameters up (2 B) at 63.0 / 2 x 0.88 GB/s each, in turn (or hidden under
    the CPU step with --overlap-cpu-optimizer-d2h-h2d)."""
    base = {"system": {"profile": "dgx_h100", "nodes": 1},
            "model": {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 50304},
            "training": {"seq_len": 2048, "micro_batch": 2, "global_batch": 64}}
    plain = simulate(load_scenario({**base, "parallel": {"distributed_optimizer": True}}))
    half = {"distributed_optimizer": True, "optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}
    r = simulate(load_scenario({**base, "parallel": half}))
    before, after = plain.memory.stages[0], r.memory.stages[0]
    assert after.bucket("main_params") == before.bucket("main_params") / 2
    assert after.bucket("optimizer") == before.bucket("optimizer") / 2
    assert after.bucket("gradients") == before.bucket("gradients")
    n = before.bucket("main_params") / 4 / 2            # owned x 4 B on the GPU before; half of owned offloaded
    link = PCIE5_X16 / 2 * HOST_COPY
    assert r.step.offload_s == pytest.approx(n * 4 / link + n * 2 / link, rel=1e-9)
    cpu_s = n * 30 / (614.4e9 * CPU_EFF / 8)
    assert r.step.optimizer_s == pytest.approx(cpu_s + plain.step.optimizer_s * _gpu_share(plain), rel=1e-9)
    overlapped = simulate(load_scenario({**base, "parallel": {**half, "overlap_cpu_optimizer_d2h_h2d": True}}))
    assert overlapped.step.offload_s == 0.0            # max(d2h, CPU, h2d) is the CPU step
    assert overlapped.step.step_s == pytest.approx(r.step.step_s - r.step.offload_s, rel=1e-9)


def _gpu_share(plain) -> float:
    """The share of the plain GPU optimizer step left with half the owned shard offloaded: the update of the half
    kept plus zeroing the whole gradient buffer, (u / 2 + 4 x 8) / (u + 4 x 8) for update bytes u per owned parameter
    and the 4 B fp32 main gradient of each of the 8x as many local parameters."""
    u = plain.scenario.plan.recipe.optimizer_update_bytes
    return (u / 2 + 4 * 8) / (u + 4 * 8)
