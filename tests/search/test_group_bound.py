"""The bound of a group of candidates (simulator/search/group_bound.py and exposed_bound.py, docs/search/
time_to_answer.md "Time to the answer", rounds 4 and 6): by hand against the replay and with a TP all-reduce, below
every member's exact step on hypothesis-drawn small spaces, and a search that prunes groups by it keeps the first
ten plans and the counts of one that does not, and its no-fit report moves only the memory bound's skipped points
(simulator/search/memory_bound.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.plan.config import ParallelPlan
from simulator.plan.schedules import schedule_named
from simulator.pricing.groups import GroupTimer
from simulator.pricing.overlap import coefficients
from simulator.schedule.timeline import run_timeline
from simulator.search import search
from simulator.search.evaluate import Evaluated, evaluate_points, resolve
from simulator.search.exposed_bound import with_overlap
from simulator.search.group_bound import compute_lower
from simulator.search.run import NoPlanFits, bound_groups, candidate_groups, search_context
from simulator.search.variants import Variant, dense_layer_time
from simulator.traffic import layer_traffic

REL = 1e-9

#: Llama-3-8B on 2 DGX H100 nodes (the fast-path equality test's dense model), a few knobs of each kind
DENSE = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "llama3-8b"},
         "training": {"seq_len": 4096, "global_batch": 32}}


def _variant(schedule: str, f: list[float], b: list[float], m: int, recompute_s: dict[str, float]) -> Variant:
    """A pipeline of one dense layer per stage: forward f[s] and backward b[s] compute seconds per micro-batch, the
    layer re-running recompute_s[mode] seconds."""
    pp = len(f)
    plan = SimpleNamespace(schedule=schedule_named(schedule), num_microbatches=m, parallel=ParallelPlan(pp=pp))
    layer = SimpleNamespace(recompute_s=lambda mode, modules: recompute_s.get(mode, 0.0))
    return Variant(plan, np.array([f]).T, np.array([b]).T, np.ones((pp, 1)), layer, 1.0)


def test_compute_lower_by_hand_and_against_the_replay():
    # 1F1B, 2 stages, forwards 1 and 2 s, backwards 2 and 4 s, 4 micro-batches: stage 1 starts after stage 0's
    # first forward (1 s), works 4 x 6 = 24 s, then the last backward runs on stage 0 (2 s): 27 s. Full recompute
    # re-runs 0.5 s per backward: 1 + 4 x 6.5 + 2 = 29 s; selective 0.25 s: 28 s
    parts = _variant("1f1b", [1.0, 2.0], [2.0, 4.0], 4, {"full": 0.5, "selective": 0.25})
    assert compute_lower(parts, ("none", "full", "selective")) == [27.0, 29.0, 28.0]
    orders = schedule_named("1f1b").orders(2, 1, 4)
    assert max(t.end_s for t in run_timeline(orders, [[1.0], [2.0]], [[2.0], [4.0]], 0.0)) == 27.0
    # the bound leaves the recompute out of the drain: the replay of full recompute ends at 1 + 26 + 2.5
    assert max(t.end_s for t in run_timeline(orders, [[1.0], [2.0]], [[2.5], [4.5]], 0.0)) == 29.5
    # GPipe, 3 equal stages of 1 + 2 s, 2 micro-batches: fill 2 x 1, work 2 x 3, drain 2 x 2 = 12 s; the replay
    # (all forwards, then all backwards) takes 1 x 4 + 2 x 4 = 12 s too
    gpipe = _variant("gpipe", [1.0] * 3, [2.0] * 3, 2, {})
    assert compute_lower(gpipe) == [12.0]
    ends = run_timeline(schedule_named("gpipe").orders(3, 1, 2), [[1.0]] * 3, [[2.0]] * 3, 0.0)
    assert max(t.end_s for t in ends) == 12.0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.sampled_from(["gpipe", "zb1p", "zbv", "dualpipev"]), pp=st.sampled_from([1, 4]),
       tp=st.sampled_from([[2], [4], [2, 8]]), sp=st.sampled_from([[True], [False], [False, True]]),
       overlap=st.sampled_from([[False], [True], [False, True]]),
       context=st.sampled_from([{}, {"cp": [1, 2]}, {"ulysses": [1, 2]}]),
       recompute=st.lists(st.sampled_from(["none", "selective", "full"]), min_size=1, max_size=2, unique=True))
def test_a_group_bound_is_below_every_member_step(schedule, pp, tp, sp, overlap, context, recompute):
    """Every member of every (recompute value, micro-batch, TP overlap value) of every group that passes the rules
    and fits times at least that key's bound (compute, re-run and the least exposed TP, SP, CP and Ulysses
    communication), and so at least the group's: a group the threshold excludes holds no plan faster than it."""
    data = {**DENSE, "search": {"schedule": ["1f1b", schedule], "pp": [2, pp], "tp": tp, "vpp": [1, 2],
                                "micro_batch": [1, 2], "recompute": recompute, "sharding": ["none", "zero3"],
                                "offload": ["none"], "sp": sp, "tp_comm_overlap": overlap, **context}}
    assert _check_members(data) > 0


def _check_members(data: dict) -> int:
    """Assert every timed member of every (recompute value, micro-batch, TP overlap value) of every group is at
    least its bound; returns how many were timed."""
    ctx = search_context(data)
    groups, _ = candidate_groups(ctx, 10**6)
    timed = 0
    for g in bound_groups(ctx, groups, Evaluated()):
        for key, lower in g.sub.items():
            assert lower >= g.lower > 0
            rows = evaluate_points(ctx, [p for p in g.points
                                         if (p["recompute"], p["micro_batch"], p["tp_comm_overlap"]) == key]).rows
            timed += len(rows)
            assert all(r["step_s"] >= lower * (1 - REL) for r in rows), (g.outer, key, lower)
    return timed


def test_a_tp2_group_bound_by_hand():
    """A TP 2 group (the 22B model on one DGX H100, pp 1, 1F1B, no SP, recompute off, ZeRO-3, m = 8 / dp 4 = 2):
    each layer's forward runs two row-parallel output all-reduces and its backward two input-gradient all-reduces
    of 2048 tokens x 6144 x 2 bytes = 24 MiB over NVLink, c = 0.100 ms each (the collectives model). Backward:
    they hide under the weight-gradient GEMMs (1.42 ms > 2c), exposing the interference share k 2c (k = 0.67,
    data/overlap.yaml). Forward: overlap off exposes 2c; on, they hide under the forward GEMMs (1.38 ms > 2c):
    k 2c. So per micro-batch the bound is the compute at the slowest GPU's pace plus 48 (k 2c + k 2c) = 12.87 ms
    with overlap on and 48 (2c + k 2c) = 16.04 ms off; the group's bound is the better (on), and each member's
    exposed TP seconds equal its key's term, m x 48 x (X_f + X_b)."""
    data = {"system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "korthikanti-22b"},
            "training": {"seq_len": 2048, "global_batch": 8},
            "search": {"schedule": ["1f1b"], "pp": [1], "tp": [2], "vpp": [1], "micro_batch": [1],
                       "recompute": ["none"], "sharding": ["zero3"], "offload": ["none"], "sp": [False],
                       "tp_comm_overlap": [False, True]}}
    ctx = search_context(data)
    (group,) = bound_groups(ctx, candidate_groups(ctx, 10**6)[0], Evaluated())
    plan = resolve(ctx, group.points[0])
    t = dense_layer_time(ctx, plan)
    (c,) = {GroupTimer(plan, ctx.topology).time(op, 0).call_s for op in layer_traffic(plan)}
    assert c == pytest.approx(1.0004e-4, rel=1e-4) and t.layer.fwd_gemm_s > 2 * c and t.layer.wgrad_s > 2 * c
    k, m, layers = coefficients()["overlap_interference"], plan.num_microbatches, plan.model.layers
    assert (k, m, layers) == (0.67, 2, 48)
    compute = t.slowest * (layers * (t.layer.fwd_s + t.layer.bwd_s) + t.embedding.fwd_s + t.embedding.bwd_s
                           + t.head.fwd_s + t.head.bwd_s)
    exposed = {True: layers * (k * 2 * c + k * 2 * c), False: layers * (2 * c + k * 2 * c)}
    assert exposed[True] == pytest.approx(12.87e-3, rel=1e-3) and exposed[False] == pytest.approx(16.04e-3, rel=1e-3)
    for on in (True, False):
        assert group.sub["none", 1, on] == pytest.approx(m * (compute + exposed[on]), rel=1e-12)
    assert group.lower == group.sub["none", 1, True] < group.sub["none", 1, False]
    # the representative with the other overlap value lists the ops of the member resolved with it
    plans = {p["tp_comm_overlap"]: resolve(ctx, p) for p in group.points}
    for on in (True, False):
        assert layer_traffic(with_overlap(plans[not on], on)) == layer_traffic(plans[on])
        assert with_overlap(plans[on], on) is plans[on]
    rows = evaluate_points(ctx, group.points).rows
    assert len(rows) == 2
    for row in rows:
        assert row["exposed_tp_s"] == pytest.approx(m * exposed[row["tp_comm_overlap"]], rel=1e-12)
        assert row["step_s"] >= group.sub["none", 1, row["tp_comm_overlap"]]


def test_a_moe_group_bound_is_below_every_member_step():
    """MoE layers on an EP group run the busiest rank's experts: a MoE model's variants take their compute from the
    chunk costs (Mixtral-8x7B, the fast-path equality test's MoE model, on 2 DGX H100 nodes)."""
    data = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "mixtral-8x7b"},
            "training": {"seq_len": 4096, "global_batch": 64},
            "search": {"micro_batch": [1, 2], "vpp": [1], "tp": [1, 2], "pp": [2, 4], "schedule": ["1f1b", "zb1p"],
                       "recompute": ["none", "full"], "sharding": ["none"], "offload": ["none"],
                       "tp_comm_overlap": [False, True]}}
    assert _check_members(data) > 0


@pytest.fixture(scope="module")
def both_ways():
    data = {**DENSE, "search": {"schedule": ["1f1b", "gpipe", "zbv"], "micro_batch": [1, 2],
                                "sharding": ["none", "distributed_optimizer"]}}
    return search(data), search(data, exact_top=None)


def test_pruning_groups_keeps_the_first_ten_and_the_counts(both_ways):
    bounded, every = both_ways
    assert bounded.plans[:10] == every.plans[:10]                # every column, the numbers bit for bit
    assert bounded.pruned_by_group_bound > 0 and every.pruned_by_group_bound == 0
    assert bounded.evaluated == every.evaluated
    assert bounded.valid < every.valid
    # a pruned point is counted once: rules, memory, the plan bound, the group bound, or timed
    assert bounded.evaluated == bounded.valid + sum(bounded.rejected.values())
    # the kept group of the best plan: its bound is below the best step (a group the threshold keeps can hold a
    # plan faster than the threshold)
    best = bounded.plans[0]
    ctx = search_context({**DENSE, "search": {"schedule": ["1f1b", "gpipe", "zbv"], "micro_batch": [1, 2],
                                              "sharding": ["none", "distributed_optimizer"]}})
    groups = bound_groups(ctx, candidate_groups(ctx, 10**6)[0], Evaluated())
    mine = [g for g in groups if all(g.outer[k] == best[k] for k in ("schedule", "pp", "vpp", "tp", "split"))]
    assert len(mine) == 1 and mine[0].lower <= best["step_s"] <= every.plans[9]["step_s"]


def test_no_fit_is_reported_as_without_the_bound():
    """A group is pruned by its step bound only against the exact_top-th timed plan; where nothing fits there is
    none. The memory bound (simulator/search/memory_bound.py) still skips members: each of them is one the unbounded
    search rejects by a rule or by memory (the counts move to its reason, nothing else), and the smallest peak
    reported is a lower bound of the unbounded search's."""
    from simulator.search.memory_bound import MEMORY_BOUND_REASON
    from simulator.search.run import OOM_REASON

    data = {**DENSE, "search": {"tp": [1, 2], "pp": [1, 2], "memory_headroom": "79 GiB"}}
    reports = []
    for top in (10, None):
        with pytest.raises(NoPlanFits) as info:
            search(data, exact_top=top)
        reports.append(info.value.result)
    bounded, every = reports
    skipped = bounded["rejected"][MEMORY_BOUND_REASON]
    assert skipped > 0 and MEMORY_BOUND_REASON not in every["rejected"]
    assert bounded["evaluated"] == every["evaluated"]
    assert all(bounded["rejected"].get(r, 0) <= n for r, n in every["rejected"].items())
    assert sum(n - bounded["rejected"].get(r, 0) for r, n in every["rejected"].items()) == skipped
    assert every["no_fit"]["passed_rules"] == bounded["no_fit"]["passed_rules"] + sum(
        every["rejected"][r] - bounded["rejected"].get(r, 0) for r in (OOM_REASON,))
    # both are lower bounds of the smallest peak (the unbounded one a states floor here, 10.68e9 B: its plan's
    # bound adds activations); where the unbounded one is exact, the bounded one is at most it
    least, exact = (bounded["no_fit"][k] for k in ("least_device_peak_bytes", "least_device_peak_exact"))
    if every["no_fit"]["least_device_peak_exact"]:
        assert least <= every["no_fit"]["least_device_peak_bytes"] * (1 + REL)
    assert not exact and least > search_context(data).capacity - 79 * 2**30
    assert bounded["no_fit"]["memory_bound_skipped"] == skipped


def test_groups_are_built_and_bounded_without_the_cycle_collector(monkeypatch):
    """Round 5b: building the groups and their bounds runs with Python's cyclic collector paused (its full
    collections walked the search's caches: ~0.4 s of 175B's 2.3 s), and the collector is back on afterwards."""
    import gc

    import simulator.search.run as run_module

    seen = []
    real_resolve, real_variants = run_module.resolve, run_module.group_variants
    monkeypatch.setattr(run_module, "resolve", lambda ctx, point, key=None: (seen.append(gc.isenabled()),
                                                                             real_resolve(ctx, point, key))[1])
    monkeypatch.setattr(run_module, "group_variants", lambda ctx, g, resolve: (seen.append(gc.isenabled()),
                                                                               real_variants(ctx, g, resolve))[1])
    data = {**DENSE, "search": {"schedule": ["1f1b"], "micro_batch": [1], "pp": [1, 2], "tp": [1, 2], "vpp": [1],
                                "sharding": ["none"], "offload": ["none"]}}
    assert gc.isenabled()
    ctx = search_context(data)
    groups, out = candidate_groups(ctx, 10**6)
    kept = bound_groups(ctx, groups, out)
    assert kept and all(g.lower > 0 for g in kept)
    assert seen and not any(seen), "the collector ran while the groups were built and bounded"
    assert gc.isenabled()


def test_the_smallest_peak_kept_does_not_depend_on_the_order():
    """Parts are evaluated best bound first, not in the space's order: of two plans out of memory at one peak, the
    no-fit report keeps the one first in the space's enumeration (Space.place), in either order and across merges."""
    ctx = search_context({**DENSE, "search": {"tp": [1, 2], "pp": [1], "schedule": ["1f1b"], "micro_batch": [1, 2],
                                              "offload": ["none"], "recompute": ["none"]}})
    (one_tp, two_tp), _ = candidate_groups(ctx, 10**6)
    first, second = one_tp.points[0], two_tp.points[-1]
    assert ctx.space.place(first) < ctx.space.place(second)
    plans = [resolve(ctx, p) for p in (first, second)]
    for order in ((0, 1), (1, 0)):
        one, merged = Evaluated(), Evaluated()
        for i in order:
            one.note_oom(1e9, False, plans[i], "none", ctx.space.place((first, second)[i]))
            part = Evaluated()
            part.note_oom(1e9, False, plans[i], "none", ctx.space.place((first, second)[i]))
            merged.merge(part)
        for out in (one, merged):
            assert out.least_oom[2]["tp"] == plans[0].parallel.tp and out.least_oom_at == ctx.space.place(first)


def test_the_stacked_bounds_equal_each_variants_own():
    """set_lowers bounds a group's variants at once (stacked arrays; a split schedule's ranks' seconds as arrays):
    every key's bound equals, bit for bit, the least of compute_lower over its variants one at a time, on every
    schedule."""
    data = {**DENSE, "search": {"schedule": ["1f1b", "gpipe", "zb1p", "zbv", "dualpipev", "dualpipe"],
                                "pp": [2, 4], "tp": [2, 8], "vpp": [1, 2], "micro_batch": [1, 2],
                                "recompute": ["none", "selective", "full"], "sharding": ["none", "zero3"],
                                "offload": ["none"], "tp_comm_overlap": [False, True]}}
    ctx = search_context(data)
    groups, _ = candidate_groups(ctx, 10**6)
    schedules, keys = set(), 0
    for g in bound_groups(ctx, groups, Evaluated()):
        expected: dict[tuple, float] = {}
        for v in g.variants:
            lowers = compute_lower(v, g.recompute_values, g.rerun[id(v.plan)])
            for value, lower in zip(g.recompute_values, lowers, strict=True):
                key = (value, v.plan.training.micro_batch, v.overlap)
                expected[key] = min(expected.get(key, np.inf), lower)
        assert g.sub == expected
        schedules.add(g.outer["schedule"])
        keys += len(expected)
    assert schedules == {"1f1b", "gpipe", "zb1p", "zbv", "dualpipev", "dualpipe"} and keys > 100
