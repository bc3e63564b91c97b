"""The fast path of the plan search equals ``simulate()`` (the event-timeline reference) to 1e-9 relative, on
hypothesis-drawn plans of a dense and a MoE model under every schedule; the fast timelines equal the replay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.entries.simulate import simulate
from simulator.errors import UserError
from simulator.plan.pipeline import in_flight, in_flight_walk, stage_orders
from simulator.schedule.fast_timeline import (
    dependencies,
    gpipe_ends,
    level_ends,
    level_ends_many,
    levels_walk,
    sweep_levels,
)
from simulator.schedule.timeline import run_timeline
from simulator.search.evaluate import evaluate_points, resolve
from simulator.search.rank import PLAN_KEYS, TERMS
from simulator.search.run import candidates, search_context

REL = 1e-9

DENSE = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "llama3-8b"},
         "training": {"seq_len": 4096, "global_batch": 32},
         "search": {"micro_batch": [1, 2], "vpp": [1, 2, 4], "recompute": ["none", "selective", "full"],
                    "schedule": ["1f1b", "gpipe"]}}
MOE = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "mixtral-8x7b"},
       "training": {"seq_len": 4096, "global_batch": 64},
       "search": {"micro_batch": [1, 2], "vpp": [1, 2], "tp": [1, 2, 4], "pp": [1, 2, 4, 8],
                  "schedule": ["1f1b", "gpipe"]}}


def _valid_points(data: dict) -> tuple:
    ctx = search_context(data)
    points, _ = candidates(ctx, 10**6)
    valid = []
    for p in points:
        try:
            resolve(ctx, p)
        except UserError:
            continue
        valid.append(p)
    return ctx, valid


#: MoE layers overlapping two micro-batches: the timeline pairs them, so these plans fall back to the replay
MOE_PAIRED = {**MOE, "moe": {"microbatch_overlap": True}, "search": {**MOE["search"], "pp": [2, 4], "vpp": [1]}}

#: framework behaviours the recipe carries into compute: FlashAttention-2's rate, DeepSpeed's fp32 accumulation pass
DENSE_STACK = {**DENSE, "training": {**DENSE["training"], "attention_kernel": "flash2",
                                     "grad_accumulation": "separate_fp32"},
               "search": {"micro_batch": [1], "vpp": [1, 2], "recompute": ["none", "full"]}}

#: DeepSeek's bidirectional schedules (searched by default; the spaces above list 1f1b and gpipe only): only the
#: replay runs them
#: (offload, the ZeRO stages between distributed_optimizer and zero3, the per-module recompute sets and the
#: embedding/loss split are pinned: the other spaces check them; TP overlap, pp, tp, ep and micro-batch stay free)
_DUAL_PINS = {"offload": ["none"], "sharding": ["distributed_optimizer", "zero3"],
              "recompute": ["none", "selective", "full"], "split": ["uniform"]}
DUAL = {**MOE, "search": {**MOE["search"], "pp": [2, 4], "vpp": [1], "schedule": ["dualpipe", "dualpipev"],
                          **_DUAL_PINS}}
#: ... and the zero-bubble ZB-H1 / ZB-V (Qi et al. 2024), replayed the same way
DUAL_DENSE = {**DENSE, "search": {**DENSE["search"], "pp": [2, 4], "vpp": [1],
                                  "schedule": ["dualpipe", "dualpipev", "zb1p", "zbv"], **_DUAL_PINS}}

SPACES = {"dense": _valid_points(DENSE), "moe": _valid_points(MOE), "moe_paired": _valid_points(MOE_PAIRED),
          "dense_stack": _valid_points(DENSE_STACK), "dual": _valid_points(DUAL),
          "dual_dense": _valid_points(DUAL_DENSE)}


def _close(a: float, b: float, scale: float = 0.0) -> bool:
    """Relative to the values, or to ``scale`` for a residual (the bubble is the step minus its other parts, so
    its rounding is the step's)."""
    return abs(a - b) <= REL * max(abs(a), abs(b), scale, 1e-300)


def test_the_dual_space_holds_both_dual_schedules_and_the_level_spaces_neither():
    _, dual = SPACES["dual"]
    assert {p["schedule"] for p in dual} == {"dualpipe", "dualpipev"}
    assert all(p["schedule"] in ("1f1b", "gpipe") for name in ("dense", "moe") for p in SPACES[name][1])
    assert {p["schedule"] for p in SPACES["dual_dense"][1]} == {"dualpipe", "dualpipev", "zb1p", "zbv"}


def test_spaces_cover_every_schedule():
    for name, (_, points) in SPACES.items():
        if name in ("moe_paired", "dense_stack", "dual", "dual_dense"):
            continue
        kinds = {(p["schedule"], p["vpp"] > 1) for p in points}
        assert {("gpipe", False), ("1f1b", False), ("1f1b", True)} <= kinds


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SPACES)), data=st.data())
def test_fast_path_equals_simulate(kind, data):
    ctx, points = SPACES[kind]
    drawn = data.draw(st.lists(st.sampled_from(points), min_size=1, max_size=5))
    _check_rows(ctx, drawn, kind)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["dense", "moe"]), data=st.data())
def test_plans_sharing_chunk_costs_equal_simulate(kind, data):
    """Every sharding and micro-batch of one drawn plan, evaluated together in a fresh context: they share chunk
    bases (ZeRO-2/3 add their per-micro-batch ops on copies), chunk costs, placements and the micro-batch skip."""
    _, points = SPACES[kind]
    seed = data.draw(st.sampled_from(points))
    family = [p for p in points if all(p[k] == seed[k] for k in p if k not in ("sharding", "micro_batch"))]
    _check_rows(search_context(DENSE if kind == "dense" else MOE), family, kind)


def _check_rows(ctx, drawn: list, kind: str) -> None:
    rows = {tuple(str(r[k]) for k in PLAN_KEYS): r for r in evaluate_points(ctx, drawn).rows}
    for point in drawn:
        plan = resolve(ctx, point)
        reference = simulate(ctx.fixed.with_plan(plan))
        p = plan.parallel
        values = {**point, "gpus": plan.world_size, "dp": plan.dp, "sp": p.sp, "recompute": p.recompute,
                  "recompute_modules": ",".join(sorted(p.recomputed_modules))}
        key = tuple(str(values[k]) for k in PLAN_KEYS)
        if reference.memory.device_peak_bytes > ctx.capacity:
            assert key not in rows, "a plan that does not fit must be pruned"
            continue
        row = rows[key]
        if point["schedule"] in ("dualpipe", "dualpipev", "zb1p", "zbv"):
            assert row["timeline"] == "steady state"      # its F, B, W graph's steady state (split_steady)
        else:
            assert (row["timeline"] == "replay (MoE micro-batch overlap)") == (kind == "moe_paired" and point["ep"] > 1)
        step = reference.step
        assert _close(row["step_s"], step.step_s)
        assert _close(row["peak_bytes"], reference.memory.peak_bytes)
        assert _close(row["mfu"], step.mfu)
        assert _close(row["tokens_per_s"], step.tokens_per_s)
        expected = {"compute_s": step.compute_s, "recompute_s": step.recompute_s, "bubble_s": step.bubble_s,
                    "optimizer_s": step.optimizer_s, "host_s": step.host_s, "offload_s": step.offload_s,
                    **{f"exposed_{d}_s": v for d, v in step.exposed_comm_s.items()}}
        for term in TERMS:
            assert _close(row[term], expected[term], step.step_s if term == "bubble_s" else 0.0), term


@settings(max_examples=200, deadline=None)
@given(schedule=st.sampled_from(["1f1b", "gpipe"]), pp=st.integers(1, 8), vpp=st.integers(1, 4),
       groups=st.integers(1, 4), extra=st.integers(0, 5), seed=st.integers(0, 2**32 - 1))
def test_fast_timelines_equal_the_replay(schedule, pp, vpp, groups, extra, seed):
    if schedule == "gpipe" or pp == 1:
        vpp = 1
    m = pp * groups if vpp > 1 else groups + extra
    d = np.random.default_rng(seed).uniform(0.01, 3.0, (3, pp, vpp, 2))
    for b in range(3):
        replay = run_timeline(stage_orders(schedule, pp, vpp, m), [list(d[b, i, :, 0]) for i in range(pp)],
                              [list(d[b, i, :, 1]) for i in range(pp)], 0.0)
        ends = np.array([t.end_s for t in replay])
        assert np.array_equal(level_ends(schedule, pp, vpp, m, d)[b], ends)   # the same max and + : bit-identical
        if schedule == "gpipe":
            assert np.allclose(gpipe_ends(m, d)[b], ends, rtol=1e-12, atol=0)


@settings(max_examples=60, deadline=None)
@given(structures=st.lists(st.tuples(st.sampled_from(["1f1b", "gpipe"]), st.integers(1, 6), st.integers(1, 3),
                                     st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=4),
       seed=st.integers(0, 2**32 - 1))
def test_one_sweep_over_several_structures_equals_the_replay(structures, seed):
    """level_ends_many lays several structures side by side (their disjoint union, one level sweep), with batches
    of different sizes and repeated duration rows (evaluated once): every plan's ends equal its replay bit for bit."""
    rng, jobs = np.random.default_rng(seed), []
    for schedule, pp, vpp, groups, batch in structures:
        vpp = 1 if schedule == "gpipe" or pp == 1 else vpp
        m = pp * groups if vpp > 1 else groups
        d = rng.uniform(0.01, 3.0, (batch, pp, vpp, 2))
        d[batch // 2:] = d[0]                     # repeated rows
        jobs.append((schedule, pp, vpp, m, d))
    for (schedule, pp, vpp, m, d), ends in zip(jobs, level_ends_many(jobs), strict=True):
        for b in range(d.shape[0]):
            replay = run_timeline(stage_orders(schedule, pp, vpp, m), [list(d[b, i, :, 0]) for i in range(pp)],
                                  [list(d[b, i, :, 1]) for i in range(pp)], 0.0)
            assert np.array_equal(ends[b], [t.end_s for t in replay])


def test_gpipe_closed_form_by_hand():
    """Two stages, f = (1, 2), b = (3, 1), m = 3: the forwards end on stage 0 at 3 and on stage 1 at 1 + 2 + 2*2
    = 7 (stage 1 paces); the backwards of stage 1 end at 7 + 3*1 = 10; stage 0's at max(3 + 3 + 2*3 (its own
    release), 7 + (3 + 1) + 2*3 (stage 1's release, then stage 0 paces)) = 17 (by hand on the replay: B(0, j)
    end at 11, 14, 17)."""
    d = np.array([[[[1.0, 3.0]], [[2.0, 1.0]]]])
    assert gpipe_ends(3, d)[0].tolist() == [17.0, 10.0]


def test_sweep_levels_by_hand():
    """1F1B, 2 stages, 2 micro-batches: stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1. Stage 0's forwards are at
    levels 0, 1; stage 1's F0 after stage 0's F0: 1, its B0: 2, its F1 after its B0 (stage 0's F1 is at 1): 3, its
    B1: 4; stage 0's B0 after stage 1's B0 (2): 3, its B1 after stage 1's B1 (4): 5."""
    _, dep, _ = dependencies("1f1b", 2, 1, 2)
    assert sweep_levels(dep, dep.size).tolist() == [0, 1, 3, 5, 1, 2, 3, 4]


@pytest.mark.parametrize("schedule,vpps", [("gpipe", (1,)), ("1f1b", (1, 2, 3, 4))])
def test_sweep_levels_equal_the_walk(schedule, vpps):
    for pp, vpp, m in _small_pipelines(vpps, max_pp=8, max_m=19):
        if vpp > 1 and m % pp:      # interleaving needs whole groups of pp micro-batches (a plan rule)
            continue
        _, dep, _ = dependencies(schedule, pp, vpp, m)
        assert sweep_levels(dep, dep.size).tolist() == levels_walk(dep.ravel().tolist(), dep.shape[1], dep.size)


@pytest.mark.parametrize("schedule,vpps", [("gpipe", (1,)), ("1f1b", (1, 2, 3, 4))])
def test_in_flight_closed_form_equals_the_walk(schedule, vpps):
    for pp, vpp, m in _small_pipelines(vpps, max_pp=8, max_m=19):
        for i in range(pp):
            assert in_flight(schedule, pp, vpp, i, m) == in_flight_walk(schedule, pp, vpp, i, m)


def _small_pipelines(vpps, max_pp: int, max_m: int):
    """(pp, vpp, m) of every pipeline up to ``max_pp`` stages and ``max_m`` micro-batches (interleaving needs pp > 1)."""
    for pp in range(1, max_pp + 1):
        for vpp in vpps:
            if vpp > 1 and pp == 1:
                continue
            yield from ((pp, vpp, m) for m in range(1, max_m + 1))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_bounding_stages_give_the_peak_of_every_stage(data):
    """The search computes memory only for the stages that bound the peak; their peak is every stage's peak."""
    from simulator.memory.estimate import bounding_stages, estimate_memory

    kind = data.draw(st.sampled_from(sorted(SPACES)))
    ctx, points = SPACES[kind]
    plan = resolve(ctx, data.draw(st.sampled_from(points)))
    full = estimate_memory(plan, ctx.capacity)
    part = estimate_memory(plan, ctx.capacity, stages=bounding_stages(plan))
    assert part.peak_bytes == full.peak_bytes and part.device_peak_bytes == full.device_peak_bytes


@pytest.mark.parametrize("schedule,vpps", [("gpipe", (1,)), ("1f1b", (1, 2, 3, 4))])
def test_order_arrays_equal_the_orders(schedule, vpps):
    from simulator.plan.pipeline import stage_order_arrays

    for pp, vpp, m in _small_pipelines(vpps, max_pp=7, max_m=16):
        arrays = stage_order_arrays(schedule, pp, vpp, m)
        for i, order in enumerate(stage_orders(schedule, pp, vpp, m)):
            got = [("B" if b else "F", int(j), int(c)) for b, j, c in zip(*arrays[i], strict=True)]
            assert got == order, (schedule, pp, vpp, m, i)


def test_moe_microbatch_overlap_falls_back_to_the_replay():
    """Plans whose MoE layers overlap two micro-batches are timed by the replay (it pairs them), and say so."""
    ctx, points = SPACES["moe_paired"]
    drawn = [p for p in points if p["ep"] > 1 and p["recompute"] == "full"]
    rows = evaluate_points(ctx, drawn).rows
    assert rows and all(r["timeline"] == "replay (MoE micro-batch overlap)" for r in rows)
    for row in rows[:3]:
        point = next(p for p in drawn if all(p[k] == row[k] for k in ("tp", "pp", "ep", "recompute", "sharding",
                                                                      "micro_batch", "schedule")))
        reference = simulate(ctx.fixed.with_plan(resolve(ctx, point))).step
        assert _close(row["step_s"], reference.step_s) and _close(row["exposed_ep_s"], reference.exposed_comm_s["ep"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SPACES)), data=st.data())
def test_states_floor_is_a_lower_bound_of_the_peak(kind, data):
    """The search prunes by the model-states floor before building memory items: it must never exceed the peak of
    the stages it bounds (else a plan that fits would be rejected)."""
    from simulator.memory.estimate import bounding_stages, estimate_memory, state_floor_bytes

    ctx, points = SPACES[kind]
    plan = resolve(ctx, data.draw(st.sampled_from(points)))
    stages = bounding_stages(plan)
    assert state_floor_bytes(plan, stages) <= estimate_memory(plan, stages=stages).peak_bytes


def test_states_floor_is_the_state_buckets_by_hand():
    """pp 1, several micro-batches (gradients kept): the floor is the stage's weights + gradients + main params +
    optimizer, as the report's buckets sum them."""
    from simulator.memory.estimate import estimate_memory, state_floor_bytes

    ctx, points = SPACES["dense"]
    point = next(p for p in points if p["pp"] == 1 and p["tp"] == 8 and p["sharding"] == "none"
                 and p["micro_batch"] == 1)
    plan = resolve(ctx, point)
    assert plan.num_microbatches > 1
    stage = estimate_memory(plan).stages[0]
    states = sum(stage.bucket(b) for b in ("weights", "gradients", "main_params", "optimizer"))
    assert state_floor_bytes(plan, (0,)) == pytest.approx(states, rel=1e-12)
    # bf16 with fp32 main params and Adam, no sharding: 2 + 4 + 4 + 8 = 18 B per local parameter (docs/memory.md)
    assert states == pytest.approx(18 * stage.bucket("weights") / 2, rel=1e-12)


def test_the_states_floor_changes_no_search_result(monkeypatch):
    """With the floor disabled (every plan goes through the memory items) the search keeps the same plans with the
    same numbers and counts the same rejections (every peak from its own report here: the coefficients of
    tests/search/test_memory_scaling.py spare most reports, and are tested there)."""
    import simulator.search.run as run_module
    from simulator.search import evaluate
    from simulator.search.run import search

    data = {**DENSE, "search": {**DENSE["search"], "micro_batch": [1, 2, 4, 8]}}
    data["system"] = {"profile": "dgx_a100_40gb", "nodes": 2}     # 40 GB: the floor prunes some plans
    monkeypatch.setattr(evaluate, "peak_by_micro_batch", lambda *a, **k: None)   # every peak from its report
    itemised = []
    real = evaluate.estimate_memory
    monkeypatch.setattr(evaluate, "estimate_memory", lambda *a, **k: itemised.append(1) or real(*a, **k))
    # without the memory bound (search/memory_bound.py), which would skip the plans the floor prunes here
    monkeypatch.setattr(run_module, "skip_key", lambda ctx, out, group, key, members: set())
    with_floor = search(data)
    built_with_floor = len(itemised)
    monkeypatch.setattr(evaluate, "state_floor_bytes", lambda plan, stages: 0.0)
    without = search(data)
    assert built_with_floor < len(itemised) - built_with_floor, "the floor pruned some plans before their items"
    assert with_floor.rejected == without.rejected and with_floor.valid == without.valid
    assert [(r["step_s"], r["device_peak_bytes"]) for r in with_floor.plans] == \
        [(r["step_s"], r["device_peak_bytes"]) for r in without.plans]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SPACES)), factor=st.sampled_from([2, 4]), data=st.data())
def test_the_peak_grows_with_the_micro_batch(kind, factor, data):
    """The search rejects a larger micro-batch of a plan whose smaller one overflowed HBM without building its
    memory (``evaluate._monotone``): the device peak of a plan must not fall when only its micro-batch grows."""
    from hypothesis import assume

    from simulator.memory.estimate import estimate_memory
    from simulator.search.evaluate import _monotone

    ctx, points = SPACES[kind]
    point = data.draw(st.sampled_from(points))
    small = resolve(ctx, point)
    try:
        large = resolve(ctx, {**point, "micro_batch": point["micro_batch"] * factor})
    except UserError:
        assume(False)
    assert _monotone(small) and _monotone(large)
    assert estimate_memory(large).device_peak_bytes >= estimate_memory(small).device_peak_bytes


def test_the_micro_batch_skip_changes_no_search_result(monkeypatch):
    """With the skip disabled (every micro-batch through memory) the search keeps the same plans with the same
    numbers and counts the same rejections; with it, fewer memory peaks are evaluated."""
    from simulator.search import evaluate
    from simulator.search.run import search

    data = {**DENSE, "search": {**DENSE["search"], "micro_batch": [1, 2, 4, 8]}}
    data["system"] = {"profile": "dgx_a100_40gb", "nodes": 2}
    itemised = []
    real = evaluate._memory
    monkeypatch.setattr(evaluate, "_memory", lambda *a, **k: itemised.append(1) or real(*a, **k))
    with_skip = search(data)
    built_with_skip = len(itemised)
    monkeypatch.setattr(evaluate, "_monotone", lambda plan: False)
    without = search(data)
    assert built_with_skip < len(itemised) - built_with_skip, "the skip spared some memory peaks"
    assert with_skip.rejected == without.rejected and with_skip.valid == without.valid
    assert [(r["step_s"], r["device_peak_bytes"]) for r in with_skip.plans] == \
        [(r["step_s"], r["device_peak_bytes"]) for r in without.plans]


def test_dual_plans_replay_and_equal_simulate():
    """Every valid DualPipe / DualPipeV (and, dense, ZB-H1 / ZB-V) plan of the space: the search times them by the
    steady state of their F, B, W graph and says so, equal to simulate()."""
    for kind in ("dual", "dual_dense"):
        ctx, points = SPACES[kind]
        rows = evaluate_points(ctx, points).rows
        assert {r["timeline"] for r in rows} == {"steady state"}
        _check_rows(ctx, points, kind)
