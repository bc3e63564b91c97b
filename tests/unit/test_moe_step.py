"""MoE layers in the step-time engine (simulator.pricing.moe_layer, EP ops priced by the MoE backend through the
GroupTimer): backend, skew, SMs, overlap, scenario section."""

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.compute import default_efficiency
from simulator.errors import UserError
from simulator.hardware import load_cluster
from simulator.model import load_model_preset
from simulator.moe import MoeSettings
from simulator.plan import resolve_plan
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import layer_time
from simulator.scenario.load import load_scenario
from simulator.schedule import simulate_step
from simulator.topology import Topology

TRAIN = dict(seq_len=4096, micro_batch=1, global_batch=64)


@cache
def _setup(name: str, nodes: int, ep: int):
    model = load_model_preset(name)
    topology = Topology(load_cluster("dgx_h100", nodes=nodes))
    return model, resolve_plan(model, dict(tp=1, ep=ep), TRAIN, nodes * 8), topology


@cache
def step(moe: MoeSettings | None = None, name: str = "gpt-oss-120b", nodes: int = 4, ep: int = 32):
    """gpt-oss-120b (128 experts, top-4) with EP 32 over 4 DGX H100 nodes: internode expert parallelism."""
    model, plan, topology = _setup(name, nodes, ep)
    return simulate_step(model, plan, topology, moe=moe)


def _ep(r) -> float:
    return r.exposed_comm_s["ep"]


@pytest.mark.parametrize("low, high", [(0.0, 0.25), (0.25, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0)])
def test_skew_raises_step_time_and_imbalance(low, high):
    a, b = (step(MoeSettings(distribution="zipf", zipf_exponent=s)) for s in (low, high))
    assert b.moe["imbalance"] > a.moe["imbalance"]
    assert b.step_s > a.step_s
    assert b.compute_s > a.compute_s and _ep(b) > _ep(a)  # busiest rank's GEMMs and its receive volume both grow


@settings(max_examples=12, deadline=None)
@given(st.floats(0.0, 2.5), st.floats(0.0, 2.5))
def test_skew_never_lowers_step_time(s1, s2):
    low, high = sorted((round(s1, 2), round(s2, 2)))
    a, b = (step(MoeSettings(distribution="zipf", zipf_exponent=s)) for s in (low, high))
    assert b.step_s >= a.step_s * (1 - 1e-12)


def test_uniform_routing_is_balanced_and_keeps_the_expected_expert_gemms():
    r = step(MoeSettings())
    assert r.moe["imbalance"] == pytest.approx(1.0, abs=1e-9) and r.moe["sm_slowdown"] == 1.0
    model, plan, topology = _setup("gpt-oss-120b", 4, 32)
    gpu = topology.cluster.node.gpu
    lt = layer_time(model, rank_shape(model, 4096, 1, ep=32), gpu, default_efficiency(gpu.architecture), "bf16",
                    layer_index=0)
    assert r.moe["expert_fwd_s"] == lt.expert_fwd_s and r.moe["expert_bwd_s"] == lt.expert_bwd_s
    skewed = step(MoeSettings(distribution="zipf", zipf_exponent=1.0)).moe
    assert skewed["imbalance"] > 5 and skewed["max_rank_tokens"] == pytest.approx(
        skewed["imbalance"] * skewed["mean_rank_tokens"])
    assert skewed["expert_fwd_s"] > 5 * lt.expert_fwd_s


def test_deepep_normal_streamed_slows_expert_gemms_but_exposes_less_ep_internode():
    """Observed (gpt-oss-120b, EP32 on 4 DGX H100): nccl compute 0.501 s, EP exposed 0.513 s; deepep_normal
    streamed compute 0.561 s (expert GEMMs x 132/108 = 1.222), EP exposed 0.174 s; step 1.145 s -> 0.866 s."""
    nccl, deepep = step(MoeSettings()), step(MoeSettings(backend="deepep_normal", overlap="streamed"))
    assert deepep.moe["sm_slowdown"] == pytest.approx(132 / (132 - 24))
    assert deepep.moe["expert_fwd_s"] == pytest.approx(nccl.moe["expert_fwd_s"] * 132 / 108)
    assert deepep.compute_s > nccl.compute_s
    assert _ep(deepep) < 0.5 * _ep(nccl)
    assert deepep.compute_s + _ep(deepep) < nccl.compute_s + _ep(nccl)
    rows = {r.name: r for r in deepep.comm if r.dim == "ep"}
    assert rows["dispatch"].algorithm == "deepep_normal/ibrc" and rows["dispatch"].link == "rdma"
    assert {r.algorithm for r in nccl.comm if r.dim == "ep"} == {"nccl/ibrc"}
    ibgda = step(MoeSettings(backend="deepep_normal", transport="ibgda", overlap="streamed"))
    assert _ep(ibgda) < _ep(deepep) and ibgda.moe["transport"] == "ibgda"


def test_training_runs_every_dispatcher_sequentially_by_default():
    """Megatron-Core returns the routed tokens before the grouped GEMM (fused_a2a.py: DeepEP dispatch / combine with
    async_finish=False), so a training step's default is d + f + c on all SMs for DeepEP too: no SM slowdown, every
    dispatch and combine exposed, and DeepEP's faster internode kernels still expose less than NCCL's."""
    nccl, deepep = step(MoeSettings()), step(MoeSettings(backend="deepep_normal"))
    assert deepep.moe["overlap"] == "sequential" and deepep.moe["sm_slowdown"] == 1.0
    assert deepep.moe["expert_fwd_s"] == nccl.moe["expert_fwd_s"]
    m = deepep.moe
    assert m["fwd_exposed_s"] == pytest.approx(m["forward_dispatch_s"] + m["forward_combine_s"])
    assert _ep(deepep) < _ep(nccl)


@pytest.mark.parametrize("backend", ["nccl", "deepep_normal"])
def test_streamed_overlap_exposes_less_than_sequential(backend):
    seq = step(MoeSettings(backend=backend, overlap="sequential"))
    streamed = step(MoeSettings(backend=backend, overlap="streamed"))
    assert 0 < _ep(streamed) < _ep(seq)
    # sequential exposes every dispatch and combine of the layer, forward and backward
    per_layer = seq.moe["fwd_exposed_s"] + seq.moe["bwd_exposed_s"]
    assert per_layer == pytest.approx(seq.moe["forward_dispatch_s"] + seq.moe["forward_combine_s"]
                                      + seq.moe["backward_dispatch_s"] + seq.moe["backward_combine_s"])


def test_single_node_ep_rows_name_nvlink_and_the_breakdown_adds_up():
    r = step(MoeSettings(backend="deepep_normal"), name="mixtral-8x7b", nodes=1, ep=8)
    d = r.to_dict()
    assert {(c["algorithm"], c["link"]) for c in d["comm"] if c["dim"] == "ep"} == {("deepep_normal", "nvlink")}
    assert d["moe"]["imbalance"] == pytest.approx(1.0) and d["moe"]["backend"] == "deepep_normal"
    b = d["time"]["breakdown_s"]
    parts = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + sum(b["exposed_comm"].values())
    assert parts == pytest.approx(d["time"]["step_s"], rel=1e-9)


def test_dense_models_ignore_the_moe_settings():
    model = load_model_preset("llama3-8b")
    plan = resolve_plan(model, dict(tp=2), dict(seq_len=2048, micro_batch=1, global_batch=8), 8)
    topology = Topology(load_cluster("dgx_h100", nodes=1))
    base = simulate_step(model, plan, topology)
    other = simulate_step(model, plan, topology, moe=MoeSettings(backend="deepep_normal", distribution="zipf"))
    assert base.to_dict() == other.to_dict() and "moe" not in base.to_dict()


def test_engine_errors_name_the_moe_key():
    """A node limit that cannot hold top_k experts is found when routing: the error names moe.node_limit."""
    model, _, topology = _setup("gpt-oss-120b", 4, 32)
    narrow = model.model_copy(update={"moe": model.moe.model_copy(update={"experts": 32, "top_k": 12})})
    plan = resolve_plan(narrow, dict(tp=1, ep=32), TRAIN, 32)
    with pytest.raises(UserError) as err:
        simulate_step(narrow, plan, topology, moe=MoeSettings(node_limit=1))
    assert err.value.key_path == "moe.node_limit" and "cannot hold top_k=12" in err.value.message


SCENARIO = """\
system: {profile: dgx_h100, nodes: 1%s}
model: {preset: mixtral-8x7b}
parallel: {ep: 8, tp: 1}
training: {seq_len: 4096, micro_batch: 1, global_batch: 8}
moe:
%s
"""


def _scenario(tmp_path, body: str, system: str = "") -> str:
    path = tmp_path / "moe.yaml"
    path.write_text(SCENARIO % (system, body))
    return str(path)


def test_scenario_moe_section(tmp_path):
    s = load_scenario(_scenario(tmp_path, "  backend: deepep_normal\n  distribution: zipf\n  zipf_exponent: 0.5"))
    assert s.moe == MoeSettings(backend="deepep_normal", distribution="zipf", zipf_exponent=0.5)
    assert load_scenario(_scenario(tmp_path, "  {}")).moe == MoeSettings()
    gpu_issue = load_scenario(_scenario(tmp_path, "  backend: deepep_normal", ", net_issue: ibgda"))
    assert gpu_issue.moe.transport == "ibgda"
    assert load_scenario(_scenario(tmp_path, "  backend: nccl", ", net_issue: ibgda")).moe.transport is None


@pytest.mark.parametrize("body, key", [
    ("  backend: deepep_normal\n  bakend: nccl", "moe.bakend: unknown key"),
    ("  backend: deepep", "moe.backend"),
    ("  zipf_exponent: -1", "moe.zipf_exponent"),
    ("  transport: ibgda", "moe.transport"),
])
def test_scenario_moe_mistakes_exit_2_naming_the_key(tmp_path, capsys, body, key):
    path = _scenario(tmp_path, body)
    code = main(["run", path])
    err = capsys.readouterr().err
    assert code == 2 and key in err and "Traceback" not in err
    if "unknown key" in key:
        assert f"{path}:7: {key}" in err


def test_ep_ops_are_ordinary_traffic_priced_by_the_moe_backend():
    """Every EP op of the traffic list reaches the comm table through GroupTimer.time, priced by the MoE kernel
    of its route (the gradient of combine runs the dispatch route), and the sequential NCCL exposure is the sum
    of the four calls per layer: (d + c) forward + (d + c) backward, over the stage's MoE layers and micro-batches."""
    r = step(MoeSettings())
    rows = {row.name: row for row in r.comm if row.dim == "ep"}
    assert set(rows) == {"dispatch", "combine", "combine gradient", "dispatch gradient"}
    assert rows["dispatch"].call_s == pytest.approx(r.moe["forward_dispatch_s"])
    assert rows["combine gradient"].call_s == pytest.approx(r.moe["backward_dispatch_s"])
    assert rows["dispatch gradient"].call_s == pytest.approx(r.moe["backward_combine_s"])
    assert all(row.algorithm.startswith("nccl") for row in rows.values())
    per_layer = sum(row.call_s for row in rows.values())
    calls = rows["dispatch"].count                  # MoE layers of the stage x micro-batches
    assert r.exposed_comm_s["ep"] == pytest.approx(per_layer * calls, rel=1e-9)
    assert r.moe["fwd_exposed_s"] + r.moe["bwd_exposed_s"] == pytest.approx(per_layer, rel=1e-9)


def test_tensor_parallel_experts_gather_the_tokens_over_tp():
    """Experts sharded over TP (etp = tp = 8, EP 1: Megatron core_v0.6's only layout, the allgather dispatcher)
    need every token of the TP group: a MoE layer then has two TP regions like a dense layer (attention's and the
    MoE block's all-gather + reduce-scatter of T x h); with etp 1 only attention's. Mixtral 8x7B, 4096 tokens,
    TP8 + SP: each op moves 4096 x 4096 x 2 B = 33,554,432 B."""
    from simulator.traffic.layer import layer_traffic

    model = load_model_preset("mixtral-8x7b")
    train = dict(seq_len=4096, micro_batch=1, global_batch=16)
    for etp, regions in ((8, 2), (1, 1)):
        plan = resolve_plan(model, dict(tp=8, etp=etp, sp=True), train, 8)
        tp = [o for o in layer_traffic(plan) if o.dim == "tp" and o.layer == "moe"]
        assert {o.bytes for o in tp} == {33_554_432}
        assert {o.count for o in tp} == {regions}
