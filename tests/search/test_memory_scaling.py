"""The device peak of a plan at another micro-batch, from the coefficients of one report
(:mod:`simulator.memory.scaling`, what the plan search evaluates), equals :func:`estimate_memory` of that plan to
1e-9 relative, on hypothesis-drawn plans of a dense and a MoE model under every schedule."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.memory.estimate import bounding_stages, estimate_memory, fixed_bytes, state_floor_bytes
from simulator.memory.nccl import nccl_bytes
from simulator.memory.scaling import peak_by_micro_batch
from simulator.search.evaluate import resolve
from tests.search.test_fast_path import SPACES, _close


def _coefficients(plan, stages=None, cluster=None):
    p = plan.parallel
    report = estimate_memory(plan, stages=stages, cluster=cluster)
    return peak_by_micro_batch(report, plan.training.micro_batch, plan.num_microbatches, p.schedule, p.pp, p.vpp)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SPACES)), other=st.sampled_from([1, 2, 3, 4, 6, 8]),
       sharding=st.sampled_from(["none", "distributed_optimizer", "zero1", "zero2", "zero3"]),
       bounding=st.booleans(), data=st.data())
def test_peak_by_micro_batch_equals_estimate_memory(kind, other, sharding, bounding, data):
    """A plan at another micro-batch and sharding: the coefficients of the first plan's report with the second's
    fixed bytes and NCCL bytes (which follow its sharding where its gradients are all-reduced across nodes: NVLS-tree)
    give the second's peak, on the space's cluster (two DGX H100)."""
    ctx, points = SPACES[kind]
    point = data.draw(st.sampled_from(points))
    plan = resolve(ctx, point)
    try:
        moved = resolve(ctx, {**point, "micro_batch": other, "sharding": sharding})
    except UserError:
        assume(False)
    stages = bounding_stages(plan) if bounding else tuple(range(plan.parallel.pp))
    assert not bounding or bounding_stages(moved) == stages
    cluster = ctx.fixed.cluster
    coefficients = _coefficients(plan, stages, cluster)
    assert coefficients is not None
    got = coefficients.peak(other, moved.num_microbatches, fixed_bytes(moved, stages),
                            tuple(nccl_bytes(moved, cluster, s).total for s in stages))
    want = estimate_memory(moved, stages=stages, cluster=cluster)
    assert _close(got.device_peak_bytes, want.device_peak_bytes)
    assert _close(got.peak_bytes, want.peak_bytes)
    # the fixed bytes are the report's fixed items, added in the same order
    assert coefficients.fixed == fixed_bytes(plan, stages)


def test_the_coefficients_at_their_own_micro_batch_by_hand():
    """Two micro-batches (b 1 -> 2) of the dense space: the fixed part is the states and parameter-sized buffers,
    the rest doubles with b and follows the micro-batches in flight."""
    ctx, points = SPACES["dense"]
    point = next(p for p in points if p["pp"] == 2 and p["schedule"] == "gpipe" and p["micro_batch"] == 1)
    plan = resolve(ctx, point)
    report = estimate_memory(plan)
    c = _coefficients(plan)
    last = report.stages[-1]
    fixed = sum(i.bytes for i in last.items if i.scaling == "fixed")
    assert c.fixed[-1] == fixed and fixed == sum(last.bucket(b) for b in ("weights", "gradients", "main_params",
                                                                          "optimizer"))
    assert _close(c.peak(1, plan.num_microbatches).peak_bytes, report.peak_bytes)
    # GPipe holds all m micro-batches: at b 2 there are half as many, each twice as large
    assert _close(c.peak(2, plan.num_microbatches // 2).peak_bytes - fixed,
                  2 * (c.per_micro_batch[-1] + c.per_in_flight[-1] * plan.num_microbatches / 2))


def test_gradients_freed_between_steps_give_no_coefficients():
    """PyTorch's ``zero_grad(set_to_none=True)`` with one micro-batch: the peak is not a sum of the items."""
    from simulator.memory.items import MemoryItem, MemoryReport, StageMemory

    item = MemoryItem("weights", "weights.dense", 1.0, "1", scaling="fixed")
    freed = MemoryReport((StageMemory(0, (item,), gradients_freed=True),))
    assert peak_by_micro_batch(freed, 1, 1, "1f1b", 1, 1) is None
    undeclared = MemoryReport((StageMemory(0, (MemoryItem("weights", "weights.dense", 1.0, "1"),)),))
    assert peak_by_micro_batch(undeclared, 1, 1, "1f1b", 1, 1) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SPACES)), data=st.data())
def test_every_training_item_declares_its_scaling(kind, data):
    ctx, points = SPACES[kind]
    plan = resolve(ctx, data.draw(st.sampled_from(points)))
    assert all(i.scaling is not None for s in estimate_memory(plan).stages for i in s.items)


@pytest.mark.parametrize("kind", ["dense", "moe", "pytorch_amp", "pytorch_freed"])
def test_the_coefficients_change_no_search_result(kind, monkeypatch):
    """With every peak from its own report (no coefficients) the search keeps the same plans in the same order
    with the same step times, counts the same rejections, and the peaks agree to 1e-9; with them, fewer reports."""
    from simulator.search import evaluate
    from simulator.search.run import search
    from tests.search.test_fast_path import DENSE, MOE

    pytorch = {**DENSE, "training": {**DENSE["training"], "framework": "pytorch", "precision": "amp_bf16",
                                                "grad_set_to_none": False}}
    freed = {**pytorch, "training": {**pytorch["training"], "grad_set_to_none": True}}    # no coefficients
    base, profile = {"dense": (DENSE, "dgx_a100_40gb"), "moe": (MOE, "dgx_h100"),
                     "pytorch_amp": (pytorch, "dgx_h100"), "pytorch_freed": (freed, "dgx_h100")}[kind]
    # TP overlap and the embedding/loss split change time, not memory: pinned (the memory knobs stay free)
    data = {**base, "search": {**base["search"], "micro_batch": [1, 2, 4, 8], "tp_comm_overlap": [False],
                               "split": ["uniform"]}}
    data["system"] = {"profile": profile, "nodes": 2}
    reports = []
    real = evaluate.estimate_memory
    monkeypatch.setattr(evaluate, "estimate_memory", lambda *a, **k: reports.append(1) or real(*a, **k))
    fast = search(data)
    with_coefficients = len(reports)
    monkeypatch.setattr(evaluate, "peak_by_micro_batch", lambda *a, **k: None)
    exact = search(data)
    if kind == "pytorch_freed":   # gradients freed between steps: the peak is not a sum, every plan its report
        assert with_coefficients == len(reports) - with_coefficients
    else:
        assert with_coefficients < len(reports) - with_coefficients, "the coefficients spared some reports"
    assert sum(fast.rejected.values()) and fast.rejected == exact.rejected and fast.valid == exact.valid
    keys = ("gpus", "tp", "pp", "vpp", "cp", "ep", "sharding", "recompute", "schedule", "micro_batch", "step_s")
    assert [tuple(r[k] for k in keys) for r in fast.plans] == [tuple(r[k] for k in keys) for r in exact.plans]
    for a, b in zip(fast.plans, exact.plans, strict=True):
        assert _close(a["device_peak_bytes"], b["device_peak_bytes"]) and _close(a["peak_bytes"], b["peak_bytes"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SPACES)), data=st.data())
def test_states_and_nccl_bytes_are_shared_over_the_knobs_they_do_not_read(kind, data):
    """What the search keeps once per point without its recompute choice (``evaluate._states``: the fixed bytes and
    the states floor) is the same for the plan moved to another recompute choice, TP overlap and micro-batch (the
    floor at the same m = 1 or not), exactly; NCCL's bytes (``evaluate.stage_nccl``, once per outer point) also for the
    plan moved to another offload and sharding with the same gradient reduction (all-reduced or not)."""
    ctx, points = SPACES[kind]
    point = data.draw(st.sampled_from(points))
    values = ctx.space.values
    moved = {**point, **{k: data.draw(st.sampled_from(values[k]))
                         for k in ("recompute", "tp_comm_overlap", "micro_batch")}}
    far = {**moved, **{k: data.draw(st.sampled_from(values[k])) for k in ("offload", "sharding")}}
    plan = resolve(ctx, point)
    try:
        other, third = resolve(ctx, moved), resolve(ctx, far)
    except UserError:
        assume(False)
    stages = bounding_stages(plan)
    assert fixed_bytes(other, stages) == fixed_bytes(plan, stages)
    if (other.num_microbatches == 1) == (plan.num_microbatches == 1):
        assert state_floor_bytes(other, stages) == state_floor_bytes(plan, stages)
    if (third.recipe.stage == 0) == (plan.recipe.stage == 0) and not ctx.mb_dependent_nccl:
        cluster = ctx.fixed.cluster
        assert [nccl_bytes(third, cluster, s) for s in stages] == [nccl_bytes(plan, cluster, s) for s in stages]
