"""The bound of a group of candidates (simulator/search/group_bound.py, docs/search/time_to_answer.md "Time to the answer, round
4"): by hand against the replay, below every member's exact step on hypothesis-drawn small spaces, and a search
that prunes groups by it keeps the first ten plans, the counts and the no-fit report of one that does not."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.plan.config import ParallelPlan
from simulator.plan.schedules import schedule_named
from simulator.schedule.timeline import run_timeline
from simulator.search import search
from simulator.search.evaluate import Evaluated, evaluate_points
from simulator.search.group_bound import Variant, compute_lower
from simulator.search.run import NoPlanFits, bound_groups, candidate_groups, search_context

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


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.sampled_from(["gpipe", "zb1p", "zbv", "dualpipev"]), pp=st.sampled_from([1, 4]),
       tp=st.sampled_from([[2], [4], [2, 8]]),
       recompute=st.lists(st.sampled_from(["none", "selective", "full"]), min_size=1, max_size=2, unique=True))
def test_a_group_bound_is_below_every_member_step(schedule, pp, tp, recompute):
    """Every member of every (recompute value, micro-batch) of every group that passes the rules and fits times at
    least that pair's bound, and so at least the group's: a group the threshold excludes holds no plan faster than
    it."""
    data = {**DENSE, "search": {"schedule": ["1f1b", schedule], "pp": [2, pp], "tp": tp, "vpp": [1, 2], "micro_batch": [1, 2],
                                "recompute": recompute, "sharding": ["none", "zero3"], "offload": ["none"]}}
    assert _check_members(data) > 0


def _check_members(data: dict) -> int:
    """Assert every timed member of every (recompute value, micro-batch) of every group is at least its bound;
    returns how many were timed."""
    ctx = search_context(data)
    groups, _ = candidate_groups(ctx, 10**6)
    timed = 0
    for g in bound_groups(ctx, groups, Evaluated()):
        for (value, mb), lower in g.sub.items():
            assert lower >= g.lower > 0
            rows = evaluate_points(ctx, [p for p in g.points if (p["recompute"], p["micro_batch"]) == (value, mb)]).rows
            timed += len(rows)
            assert all(r["step_s"] >= lower * (1 - REL) for r in rows), (g.outer, value, mb, lower)
    return timed


def test_a_moe_group_bound_is_below_every_member_step():
    """MoE layers on an EP group run the busiest rank's experts: a MoE model's variants take their compute from the
    chunk costs (Mixtral-8x7B, the fast-path equality test's MoE model, on 2 DGX H100 nodes)."""
    data = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "mixtral-8x7b"},
            "training": {"seq_len": 4096, "global_batch": 64},
            "search": {"micro_batch": [1, 2], "vpp": [1], "tp": [1, 2], "pp": [2, 4], "schedule": ["1f1b", "zb1p"],
                       "recompute": ["none", "full"], "sharding": ["none"], "offload": ["none"],
                       "tp_comm_overlap": [False]}}
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
    """A group is pruned only against the exact_top-th timed plan; where nothing fits there is none, so the no-fit
    report (memory, the smallest peak) is the unbounded search's."""
    data = {**DENSE, "search": {"tp": [1, 2], "pp": [1, 2], "memory_headroom": "79 GiB"}}
    reports = []
    for top in (10, None):
        with pytest.raises(NoPlanFits) as info:
            search(data, exact_top=top)
        reports.append((info.value.message, info.value.result["no_fit"], info.value.result["rejected"]))
    assert reports[0] == reports[1] and reports[0][1]["passed_rules"] > 0


def test_groups_are_built_and_bounded_without_the_cycle_collector(monkeypatch):
    """Round 5b: building the groups and their bounds runs with Python's cyclic collector paused (its full
    collections walked the search's caches: ~0.4 s of 175B's 2.3 s), and the collector is back on afterwards."""
    import gc

    import simulator.search.run as run_module

    seen = []
    real_resolve, real_variants = run_module.resolve, run_module.group_variants
    monkeypatch.setattr(run_module, "resolve", lambda ctx, point: (seen.append(gc.isenabled()),
                                                                   real_resolve(ctx, point))[1])
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
