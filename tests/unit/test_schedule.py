"""The step-time engine on the bigger kinds of plan: runs without error, breakdowns add up and are plausible,
docs/interface.md keys, trace output, and the topology effects the issue names (TP leaving NVLink)."""

import json
from functools import cache
from pathlib import Path

import pytest

from simulator.hardware import load_cluster
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.report.step import render_step
from simulator.report.trace import write_chrome_trace
from simulator.schedule import simulate_step, stage_orders
from simulator.topology import Topology
from simulator.traffic import DIMS, step_traffic

ROOT = Path(__file__).resolve().parents[2]


@cache
def topo(profile: str, nodes: int) -> Topology:
    return Topology(load_cluster(profile, nodes=nodes))


def run(preset, parallel, gpus, profile="dgx_h100", **training):
    model = load_model_preset(preset)
    train = dict(seq_len=4096, micro_batch=1, global_batch=4 * gpus) | training
    plan = resolve_plan(model, parallel, train, gpus)
    return simulate_step(model, plan, topo(profile, max(gpus // 8, 1)))


def check(result):
    d = result.to_dict()
    b = d["time"]["breakdown_s"]
    parts = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + sum(b["exposed_comm"].values())
    assert parts == pytest.approx(d["time"]["step_s"], rel=1e-9)
    assert all(v >= 0 for v in b["exposed_comm"].values()) and b["bubble"] >= 0
    assert set(b["exposed_comm"]) == set(DIMS)
    assert 0 < d["throughput"]["mfu"] <= d["throughput"]["hfu"] * 1.001 < 1
    assert b["compute"] > 0.3 * d["time"]["step_s"]          # plausibility: compute dominates sane plans
    for row in d["comm"]:
        assert set(row) >= {"dim", "op", "bytes", "count", "algorithm", "link", "time_s"}
    return d


PLANS = {
    "ddp_many_nodes": ("llama3-8b", dict(tp=1, zero=0, overlap_grad_reduce=True), 64),
    "zero1": ("llama3-8b", dict(tp=2, zero=1), 64),
    "zero2": ("llama3-8b", dict(tp=2, zero=2), 64),
    "zero3": ("llama3-8b", dict(tp=1, zero=3), 64),
    "distopt_overlap": ("llama3-70b", dict(tp=8, pp=2, sp=True, distributed_optimizer=True,
                                           overlap_grad_reduce=True, overlap_param_gather=True), 128),
    "megatron_fsdp": ("llama3-8b", dict(tp=1, distributed_optimizer=True, megatron_fsdp="optim_grads_params"), 32),
    "interleaved": ("llama3-70b", dict(tp=8, pp=4, vpp=2, sp=True, recompute="selective"), 64),
    "gpipe": ("llama3-8b", dict(tp=2, pp=4, schedule="gpipe"), 16),
    "ulysses": ("llama3-8b", dict(tp=1, ulysses=4), 16),
    "moe_ep": ("mixtral-8x7b", dict(tp=1, ep=8, distributed_optimizer=True), 64),
    "moe_ep_tp": ("mixtral-8x7b", dict(tp=2, sp=True, ep=4, pp=2), 64),
}


@pytest.mark.parametrize("name", PLANS)
def test_bigger_plans_run_with_plausible_breakdowns(name):
    preset, parallel, gpus = PLANS[name]
    d = check(run(preset, parallel, gpus))
    dims = {r["dim"] for r in d["comm"]}
    if parallel.get("zero") or parallel.get("distributed_optimizer") or gpus > parallel.get("tp", 1):
        assert "dp" in dims or parallel.get("pp", 1) * parallel.get("tp", 1) * parallel.get("ep", 1) >= gpus
    if parallel.get("ep", 1) > 1:
        assert d["time"]["breakdown_s"]["exposed_comm"]["ep"] > 0
    if parallel.get("ulysses", 1) > 1:
        assert d["time"]["breakdown_s"]["exposed_comm"]["ulysses"] > 0


@pytest.mark.parametrize("cp", [2, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
def test_context_parallel_with_and_without_sp(cp, sp):
    d = check(run("llama3-8b", dict(tp=2, cp=cp, sp=sp), 64, seq_len=32768))
    assert any(r["dim"] == "cp" for r in d["comm"])


def test_cp_all_gather_variant_exposes_more_than_ring():
    ring = run("llama3-8b", dict(tp=1, cp=8), 16, seq_len=32768).exposed_comm_s["cp"]
    gather = run("llama3-8b", dict(tp=1, cp=8, cp_comm="all_gather"), 16, seq_len=32768).exposed_comm_s["cp"]
    assert gather > ring


def test_zero3_moves_more_dp_bytes_than_zero1():
    def dp_bytes(zero):
        r = run("llama3-8b", dict(tp=1, zero=zero), 64, global_batch=256)
        return sum(c.bytes * c.count for c in r.comm if c.dim == "dp")
    assert dp_bytes(3) > 1.4 * dp_bytes(1)


def test_exposed_tp_jumps_when_tp_leaves_the_nvlink_domain():
    model = load_model_preset("llama3-70b")
    topology = topo("dgx_h100", 4)
    train = dict(seq_len=4096, micro_batch=1, global_batch=16)
    inside = simulate_step(model, resolve_plan(model, dict(tp=8, pp=4), train, 32), topology)
    # order pp fastest: consecutive ranks form the pipeline, so each TP group of 8 spans 2 nodes
    across = simulate_step(model, resolve_plan(model, dict(tp=8, pp=4, order="pp-tp-cp-ep-dp"), train, 32),
                           topology)
    assert {r["link"] for r in inside.to_dict()["comm"] if r["dim"] == "tp"} == {"nvlink"}
    assert {r["link"] for r in across.to_dict()["comm"] if r["dim"] == "tp"} == {"ib"}
    assert across.exposed_comm_s["tp"] > 3 * inside.exposed_comm_s["tp"]


def test_overlap_grad_reduce_hides_dp_time():
    plain = run("llama3-8b", dict(tp=1), 64, global_batch=64).exposed_comm_s["dp"]
    hidden = run("llama3-8b", dict(tp=1, overlap_grad_reduce=True), 64, global_batch=64).exposed_comm_s["dp"]
    assert hidden < plain


def test_full_recompute_costs_about_one_forward():
    base = run("llama3-8b", dict(tp=8), 8, global_batch=8)
    full = run("llama3-8b", dict(tp=8, recompute="full"), 8, global_batch=8)
    assert full.recompute_s > 0.25 * base.compute_s
    assert full.step_s > base.step_s


def test_schedule_orders_hold_every_op_once():
    for schedule, pp, vpp, m in [("1f1b", 4, 1, 8), ("1f1b", 4, 2, 8), ("gpipe", 3, 1, 5), ("1f1b", 4, 1, 2)]:
        orders = stage_orders(schedule, pp, vpp, m)
        for order in orders:
            assert sorted(order) == sorted([(k, j, c) for k in "FB" for j in range(m) for c in range(vpp)])


def test_trace_and_text_report(tmp_path):
    result = run("llama3-8b", dict(tp=2, pp=2, cp=2, sp=True), 16)
    path = write_chrome_trace(result, tmp_path / "step.json")
    trace = json.loads(path.read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"pipeline stage 0", "pipeline stage 1"}
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"compute", "tp comm", "cp comm", "pp comm"} <= threads
    assert all(e["dur"] > 0 for e in trace["traceEvents"] if e["ph"] == "X")
    assert "step time" in render_step(result)


def test_breakdown_follows_the_stage_that_sets_the_pace_of_a_moe_pipeline():
    """DeepSeek-V3 (3 dense + 58 MoE layers over 16 stages, EP 64): the 4-MoE-layer stages are the busiest, so the
    breakdown shows their exposed EP time and a small bubble, not the idle lightweight last stage (issue 11: it
    showed 75% 'bubble' and no EP). The last stage holds 2 MoE layers, the MTP module's MoE layer and two output
    heads. Busy time + bubble = step on the named stage."""
    from simulator.entries.simulate import simulate
    from simulator.scenario.load import load_scenario

    step = simulate(load_scenario(ROOT / "scenarios" / "deepseek_v3_ep64.yaml")).step
    neck = step.bottleneck
    assert neck["stage"] not in (0, 15) and neck["resource"] == "exposed ep"
    assert step.stage_busy_s[neck["stage"]] == max(step.stage_busy_s)
    # 2 + 1 (MTP) MoE layers and two output heads vs 4 MoE layers: between 3/4 and all of the busiest
    assert 0.75 * step.stage_busy_s[neck["stage"]] < step.stage_busy_s[15] < step.stage_busy_s[neck["stage"]]
    assert step.bubble_s < 0.2 * step.step_s and step.exposed_comm_s["ep"] > 0.4 * step.step_s
    parts = (step.compute_s + step.recompute_s + step.optimizer_s + step.bubble_s + step.host_s
             + sum(step.exposed_comm_s.values()))
    assert parts == pytest.approx(step.step_s, rel=1e-9)
    assert step.to_dict()["time"]["bottleneck"]["resource"] == "exposed ep"


def test_microbatch_overlap_merges_a_forward_and_a_backward_of_different_microbatches():
    """One stage, two micro-batches (order F0 B0 F1 B1): forward = 1 s compute + 0.5 s exposed EP, backward = 2 s +
    0.4 s. B0 -> F1 is the only pair of different micro-batches: it hides min(0.4, 1) + min(0.5, 2) = 0.9 s, less the
    interference share. Step: 2 x (1.5 + 2.4) - 0.9 x (1 - k)."""
    from simulator.plan.pipeline import stage_orders
    from simulator.schedule.timeline import PairHiding, run_timeline

    for k in (0.0, 0.67):
        hiding = PairHiding([[0.5]], [[0.4]], [[1.0]], [[2.0]], k)
        tl = run_timeline(stage_orders("1f1b", 1, 1, 2), [[1.5]], [[2.4]], 0.0, hiding)[0]
        assert tl.end_s == pytest.approx(2 * 3.9 - 0.9 * (1 - k), rel=1e-12)
        assert tl.pair_hidden_s == pytest.approx(0.9 * (1 - k), rel=1e-12)
    assert run_timeline(stage_orders("1f1b", 1, 1, 2), [[1.5]], [[2.4]], 0.0)[0].end_s == pytest.approx(7.8)


def test_microbatch_overlap_hides_ep_time_of_a_moe_pipeline():
    """Qwen3-235B-shaped DeepEP run (dev set): turning the overlap on lowers the exposed EP time, never raises the
    step, and the breakdown still adds up."""
    import yaml

    from simulator.entries.simulate import simulate
    from simulator.scenario.load import load_scenario

    doc = yaml.safe_load((ROOT / "simulator/validation/data/published_runs/zoo_qwen3_235b_deepep_ep32.yaml"
                          ).read_text())
    off = simulate(load_scenario(doc)).step
    doc["moe"]["microbatch_overlap"] = True
    on = simulate(load_scenario(doc)).step
    assert on.exposed_comm_s["ep"] < 0.8 * off.exposed_comm_s["ep"] and on.step_s < off.step_s
    parts = on.compute_s + on.recompute_s + on.optimizer_s + on.bubble_s + on.host_s + sum(on.exposed_comm_s.values())
    assert parts == pytest.approx(on.step_s, rel=1e-9)


def test_network_collectives_interfere_by_the_sms_their_channels_hold():
    """A group spanning nodes: NCCL runs one resident block per channel (src/enqueue.cc); the DGX H100 collective
    model prices network traffic on 2 channels per NIC the group uses, so a hidden second costs channels / 132 s
    of compute. A group inside one node keeps the NVLink-fitted default (None -> overlap_interference 0.67)."""
    from simulator.pricing.groups import GroupTimer
    from simulator.pricing.overlap import coefficients, exposed, network_interference

    assert network_interference(16, 132) == pytest.approx(0.1212, abs=1e-4)
    assert network_interference(16, 108) == pytest.approx(0.1481, abs=1e-4)
    assert network_interference(200, 132) == 1.0
    model = load_model_preset("llama3-8b")
    train = dict(seq_len=4096, micro_batch=1, global_batch=32)
    for tp, channels in ((8, 2), (1, 16)):
        # TP 8: the DP group has one GPU per node and prices its traffic on that GPU's NIC (2 channels);
        # TP 1: eight GPUs per node share the node's 8 NICs (16 channels)
        plan = resolve_plan(model, dict(tp=tp, overlap_grad_reduce=True), train, 32)
        timer = GroupTimer(plan, topo("dgx_h100", 4))
        traffic = step_traffic(plan)
        ops = {o.dim: o for o in traffic.stages[0] + tuple(traffic.layer)}
        assert timer.model(ops["dp"].group, 0).placement.nics_per_node * 2 == channels
        assert timer.time(ops["dp"], 0).interference == pytest.approx(channels / 132)
        if tp > 1:
            assert timer.time(ops["tp"], 0).interference is None                # TP inside a node
    # 1 s of hidden network traffic under 2 s of compute exposes 0.121 s; on NVLink it would expose 0.67 s
    assert exposed(1.0, 2.0, 16 / 132) == pytest.approx(0.1212, abs=1e-4)
    assert exposed(1.0, 2.0) == pytest.approx(coefficients()["overlap_interference"])



def test_h200_interference_measurement_bounds_the_sm_share_model():
    """simulator/validation/data/h200_overlap: resident 512-thread blocks beside a compute-bound GEMM on an H200.
    From 16 blocks on the GEMM never loses more than the SM share the blocks hold (network_interference is the
    upper end), from 32 blocks at least 0.6 of it, and streaming blocks cost no more than waiting ones (within
    0.05)."""
    from simulator.validation import VALIDATION_DATA

    rows = [json.loads(line) for line in (VALIDATION_DATA / "h200_overlap" / "overlap_interference.jsonl")
            .read_text().splitlines() if line.strip()]
    cases = [r for r in rows if r["kind"] == "interference"]
    assert len(cases) == 24
    for r in cases:
        if r["blocks"] >= 16:
            assert r["interference"] <= r["sm_share"]
        if r["blocks"] >= 32:
            assert r["interference"] >= 0.6 * r["sm_share"]
    by = {(r["gemm"], r["side"], r["blocks"]): r["interference"] for r in cases}
    for gemm, _, blocks in by:
        assert abs(by[(gemm, "copy", blocks)] - by[(gemm, "spin", blocks)]) <= 0.05
