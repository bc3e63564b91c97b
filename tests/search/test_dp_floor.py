"""The ZeRO-2/3 floor of a part's bound (simulator/search/dp_floor.py, docs/search/time_to_answer.md round 12): for
every ZeRO-2/3 plan of a batched schedule, the refined bound is at most its step (the search times every plan to
check), the floor raises the bound above the group's where the per-micro-batch DP seconds dominate, and a search
with it gives the same first plans as one that times everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.scenario.document import read_document
from simulator.search.dp_floor import refined_lowers
from simulator.search.evaluated import Evaluated
from simulator.search.group_bound import part_key
from simulator.search.run import bound_groups, candidate_groups, search, search_context

from .spaces import megatron_space, pytorch_space

ROOT = Path(__file__).resolve().parents[2]

#: the columns a row shares with its point, which identify it
_KEYS = ("tp", "pp", "vpp", "schedule", "sharding", "recompute", "micro_batch", "tp_comm_overlap", "offload", "cp",
         "ulysses", "ep", "sp", "split")


def _refined(data) -> list[tuple[dict, float, float]]:
    """(point, refined bound, group-part bound) of every ZeRO-2/3 member with a floor."""
    ctx = search_context(data)
    groups, _ = candidate_groups(ctx, 10**9)
    out = []
    for g in bound_groups(ctx, groups, Evaluated()):
        for p in g.points:
            key = part_key(p)
            got = refined_lowers(ctx, g, key, {p["sharding"]})
            if p["sharding"] in got:
                out.append((p, got[p["sharding"]], g.sub.get(key, g.lower)))
    return out


def _530b() -> dict:
    """530B (scenarios/korthikanti_530b.yaml) at tp 8, pp 1 and 5, 1F1B and ZB-V, ZeRO-2, ZeRO-3 and the distributed
    optimizer: at pp 1 ZeRO-3's per-micro-batch gathers cross the network (dp 35) and dominate its step."""
    data = read_document(ROOT / "scenarios" / "korthikanti_530b.yaml").data
    data.pop("parallel")
    data["search"] = {"tp": [8], "pp": [1, 5], "vpp": [1, 3], "micro_batch": [1, 2], "schedule": ["1f1b", "zbv"],
                      "sharding": ["zero2", "zero3", "distributed_optimizer"]}
    return data


def test_the_floor_is_a_lower_bound_of_every_step_and_tight_where_dp_dominates():
    data = _530b()
    steps = {tuple(r[k] for k in _KEYS): r["step_s"] for r in search(data, exact_top=None).plans}
    refined = _refined(data)
    checked = []
    for p, lower, part in refined:
        step = steps.get(tuple(p[k] for k in _KEYS))
        if step is None:            # out of memory: no step to compare with
            continue
        assert part * (1 - 1e-12) <= lower <= step, (p, part, lower, step)
        checked.append((p["sharding"], lower / step, lower / part))
    assert {h for h, _, _ in checked} == {"zero2", "zero3"}
    # within 2% of the step where the gathers dominate (pp 1, micro-batch 1: 133.4 s against 134.7-135.1 s), four
    # times the group's bound (31.2-41.3 s, compute and TP communication only)
    assert max(r for _, r, _ in checked) > 0.98 and max(t for _, _, t in checked) > 4, checked


@pytest.mark.parametrize("space", [megatron_space, pytorch_space])
def test_no_floor_below_the_group_bound(space):
    """The floor never lowers a part's bound (beyond the rounding of summing the same seconds in another order)."""
    refined = _refined(space())
    assert {p["sharding"] for p, _, _ in refined} >= {"zero3"}
    for _, lower, part in refined:
        assert lower >= part * (1 - 1e-12)


@pytest.mark.parametrize("top", [1, 3, 10])
def test_the_first_plans_equal_those_of_a_search_that_times_everything(top):
    data = _530b()
    every, bounded = search(data, exact_top=None), search(data, exact_top=top)
    assert bounded.plans[:top] == every.plans[:top] and bounded.evaluated == every.evaluated


def test_the_floor_is_the_chunk_costs_dp_seconds():
    """dp_seconds prices the per-micro-batch DP ops alone (middle stages once): equal, chunk by chunk, to the
    ``comm["dp"]`` of the plan's own chunk costs (prepare_step), on pp 5 with 3 chunks per stage and on ZB-V."""
    from simulator.memory.offload import offloaded_activation_bytes
    from simulator.schedule.step import prepare_step
    from simulator.search.dp_floor import dp_seconds

    data = _530b()
    ctx = search_context(data)
    groups, _ = candidate_groups(ctx, 10**9)
    checked = 0
    for g in bound_groups(ctx, groups, Evaluated()):
        if g.outer["pp"] != 5:
            continue
        for (_, sharding), plan in g.plans.items():
            parts = prepare_step(ctx.fixed.model, plan, ctx.topology, calibration=ctx.calibration, moe=ctx.fixed.moe,
                                 gpu_speed_sigma=ctx.fixed.system.gpu_speed_sigma, cache=ctx.step_cache,
                                 offload_activation_bytes=offloaded_activation_bytes(plan))
            f = [[x.comm["dp"] for x, _ in c] for c in parts.chunks]
            b = [[x.comm["dp"] for _, x in c] for c in parts.chunks]
            got = dp_seconds(ctx, plan)
            if sharding == "distributed_optimizer":
                assert got is None and not any(map(any, f + b))
                continue
            assert got[0].tolist() == f and got[1].tolist() == b
            checked += 1
    assert checked >= 4
