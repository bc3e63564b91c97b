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
per (group, sharding), from the chunk costs (:func:`~simulator.schedule.step.prepare_step`, whose ``comm["dp"]``
holds exactly those ops' seconds: no other op of a chunk is a ``dp`` one) of the first plan of that sharding the
group's bound resolved; the step cache keeps those costs for the members timed later. Only batched schedules (the
split ones are bounded plan by plan, :mod:`.bound`) and plans whose slowest GPU's pace is at least 1 and whose MoE
layers do not pair micro-batches are refined.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.memory.offload import offloaded_activation_bytes
from simulator.schedule.step import prepare_step
from simulator.search.group_bound import Group, compute_lower, recompute_seconds

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
    if variant is None or variant.paired or variant.slowest < 1 or plan.schedule.replay == "split":
        return None
    floor = _floor(ctx, g, sharding, plan)
    if floor is None:
        return None
    values = tuple(dict.fromkeys(k[0] for k in g.sub))
    lowers = compute_lower(variant, values, recompute_seconds(variant, values), floor)
    g.refined[slot] = dict(zip(values, lowers, strict=True))
    return g.refined[slot]


def _floor(ctx, g: Group, sharding: str, plan: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """H + P of every chunk's forward and backward (stage, chunk) for ``sharding`` in ``g`` (module docstring),
    once per (group, sharding); None where no chunk has per-micro-batch DP seconds."""
    if sharding not in g.dp_floor:
        parts = prepare_step(ctx.fixed.model, plan, ctx.topology, calibration=ctx.calibration, moe=ctx.fixed.moe,
                             gpu_speed_sigma=ctx.fixed.system.gpu_speed_sigma, cache=ctx.step_cache,
                             offload_activation_bytes=offloaded_activation_bytes(plan))
        f = np.array([[x.comm["dp"] for x, _ in c] for c in parts.chunks])
        b = np.array([[x.comm["dp"] for _, x in c] for c in parts.chunks])
        g.dp_floor[sharding] = (f, b) if (f.any() or b.any()) else None
    return g.dp_floor[sharding]
