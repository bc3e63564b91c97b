"""A tighter bound for the ZeRO-2/3 members of a part that the best-first order reaches (docs/search/
time_to_answer.md, round 12).

The group bound (:mod:`.group_bound`) counts each chunk's compute and least exposed TP communication, not the
per-micro-batch data-parallel gathers and reductions of ZeRO-2 and ZeRO-3 (:func:`~simulator.schedule.costs.
microbatch_dp_cost`). Where those dominate (530B at tp 8, pp 1: a step of 134.7 s against a group bound of 31 s)
the order reaches such members long before the threshold could exclude them, and times them.

**The floor.** Let a chunk's forward (or backward) carry per-micro-batch DP ops of H seconds overlapped with its
compute and P seconds not overlapped (both at one call each times the chunk's share of the stage's parameters).
:func:`~simulator.schedule.costs.microbatch_dp_cost` hides H behind the window W = c + r + X (the chunk's compute,
re-run and, when the ops cross the network, the exposed communication that stays inside the NVLink domain, X <= E,
its whole exposed communication before the DP ops), and exposes at least H - W of it (:func:`~simulator.pricing.
overlap.exposed`). The chunk's duration at the slowest GPU's pace s is then

    s (c + r) + E + exposed + P + host >= s (c + r) + E + H - (c + r + X) + P >= H + P        (s >= 1),

so each forward lasts at least max(its group-bound seconds, H_f + P_f) and each backward at least
max(its group-bound seconds + its re-run seconds, H_b + P_b); :func:`~simulator.search.group_bound.compute_lower`
takes those maxima as the durations of its max-plus bound, which stays a lower bound of the step for the same
reason as before (every stage end is non-decreasing in every op's duration).

**What it reads.** The ops are :func:`~simulator.traffic.step.data_parallel_traffic`'s, a function of the model,
the outer point and the recipe (of the inner knobs, only the sharding: not the micro-batch, the recompute mode, the
TP overlap or the offload), and their seconds come from the DP group's placement (outer). So H + P is computed once
per (group, sharding) (:func:`dp_seconds`: the chunk costs' own pricing of those ops alone, on the first plan of
that sharding the group's bound resolved), and only where the order reaches a part with such members.

**Split schedules** (DualPipe, DualPipeV, ZB-H1, ZB-V) take the floor in the work of a rank per micro-batch
(:func:`~simulator.search.group_bound.split_floor`): every F, B and W op of a chunk is part of that chunk's forward
or backward total, each at least its floor, and an overlapped F&B pair hides only EP seconds, so where a plan has no
EP all-to-all the sum holds. Plans whose slowest GPU's pace is below 1, whose MoE layers pair micro-batches, or
(split schedules) with EP are not refined.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.moe import DEFAULT_MOE_SETTINGS
from simulator.pricing.groups import GroupTimer
from simulator.schedule.costs import Cost, microbatch_dp_cost
from simulator.search.group_bound import Group, compute_lower
from simulator.search.variants import recompute_seconds
from simulator.traffic.step import stage_traffic

#: sharding stages with per-micro-batch DP ops (ZeRO-2's gradient reduce-scatter, ZeRO-3's gathers too)
PER_MICROBATCH_STAGE = 2


def refined_lowers(ctx, g: Group, key: tuple[str, int, bool], shardings: set[str]) -> dict[str, float]:
    """Per sharding of ``shardings`` that has a floor (module docstring), the bound of ``g``'s members with part key
    ``key`` (:func:`~simulator.search.group_bound.part_key`) and that sharding; the others are left out (their
    bound stays the part's)."""
    value, mb, overlap = key
    out = {}
    for sharding in shardings:
        lowers = _lowers(ctx, g, mb, overlap, sharding)
        if lowers is not None and value in lowers:
            out[sharding] = lowers[value]
    return out


def _lowers(ctx, g: Group, mb: int, overlap: bool, sharding: str) -> dict[str, float] | None:
    """:func:`compute_lower` with the DP floor of every recompute value of ``g``, for the members of (``mb``,
    ``overlap``, ``sharding``), kept on the group (None: no floor)."""
    slot = (mb, overlap, sharding)
    if slot in g.refined:
        return g.refined[slot]
    g.refined[slot] = None
    plan = g.plans.get((mb, sharding))
    represent = g.variant_plan.get((mb, sharding))
    if plan is None or represent is None or plan.recipe.stage < PER_MICROBATCH_STAGE:
        return None
    variant = next((v for v in g.variants if v.plan is represent and v.overlap == overlap), None)
    if variant is None or variant.paired or variant.slowest < 1:
        return None
    if plan.schedule.replay == "split" and plan.model.moe is not None and plan.parallel.ep > 1:
        return None            # an overlapped pair may hide EP seconds: split_floor's sum does not hold
    floor = _floor(ctx, g, sharding, plan)
    if floor is None:
        return None
    values = g.recompute_values        # set_lowers' (the members may have shrunk since: memory_bound)
    rerun = g.rerun.get(id(represent))
    if rerun is None:
        rerun = g.rerun[id(represent)] = recompute_seconds(variant, values)
    lowers = compute_lower(variant, values, rerun, floor)
    g.refined[slot] = dict(zip(values, lowers, strict=True))
    return g.refined[slot]


def _floor(ctx, g: Group, sharding: str, plan: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """H + P of every chunk's forward and backward (stage, chunk) for ``sharding`` in ``g`` (module docstring),
    once per (group, sharding); None where no chunk has per-micro-batch DP seconds."""
    if sharding not in g.dp_floor:
        g.dp_floor[sharding] = dp_seconds(ctx, plan)
    return g.dp_floor[sharding]


def dp_seconds(ctx, plan: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Per stage and chunk of ``plan``, the seconds of its per-micro-batch DP ops in a forward and in a backward
    (``comm["dp"]`` of :func:`~simulator.schedule.costs.microbatch_dp_cost`, the code the chunk costs run, on empty
    costs: only those ops are priced, on the plan's group timer with the search's shared placements); None where
    there are none."""
    stages, _ = stage_traffic(plan)
    timer = GroupTimer(plan, ctx.topology, ctx.calibration, ctx.fixed.moe or DEFAULT_MOE_SETTINGS,
                       shared=ctx.step_cache.layout(plan))
    f, b = np.zeros((plan.parallel.pp, len(plan.stage_chunks[0]))), np.zeros((plan.parallel.pp,
                                                                               len(plan.stage_chunks[0])))
    seen: dict[tuple, int] = {}     # stages with one op tuple, chunk split and groups (the middle ones): priced once
    for s, ops in enumerate(stages):
        mine = tuple(o for o in ops if o.scope == "microbatch")
        if not mine:
            continue
        key = (id(ops), plan.stage_chunks[s], len(plan.stage_layers[s]), tuple(timer.key_id(o.group, s) for o in mine))
        if (same := seen.setdefault(key, s)) != s:      # an op's seconds read the stage only through its group's key
            f[s], b[s] = f[same], b[same]
            continue
        for c, n in enumerate(plan.stage_chunks[s]):
            fwd, bwd = Cost(), Cost()       # the chunk's share of the stage's parameters, as its chunk costs take
            microbatch_dp_cost(mine, timer, s, n / max(len(plan.stage_layers[s]), 1), fwd, bwd)
            f[s, c], b[s, c] = fwd.comm["dp"], bwd.comm["dp"]
    return (f, b) if f.any() or b.any() else None
