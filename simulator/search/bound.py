"""Pruning by a bound: plans whose timeline is computed one plan at a time are not timed when they cannot reach
the search's first ``exact_top`` plans (docs/search.md, "Pruning by a bound").

A plan timed alone (:func:`timed_alone`: DualPipe, DualPipeV, ZB-H1, ZB-V, whose F, B, W graph's steady state runs
per plan, and any schedule without a fast evaluator, which the replay runs) gets its own lower bound of the step
(:func:`step_lower_bound`) once its part of a group is reached; the search's one best-first order
(:func:`simulator.search.best_first.time_best_first`) then times it when no ``exact_top`` timed plans are all
better, and otherwise counts it under :data:`BOUND_REASON` untimed. The order and the rounds depend only on bounds
and values, so which plans are pruned does not depend on the executor or on the order of the shards, and the first
``exact_top`` plans are those of a search without the bound, in the same order with the same numbers.

The bound: each rank runs its ops one after another, so it ends no earlier than its first op's start plus the
seconds of all its ops, and its tail (exposed per-step communication and the optimizer,
:func:`simulator.schedule.tails.stage_tail`, which does not depend on when the tail starts) comes after. The step
is the latest rank's end, so

    step >= max_s [ r_s + busy_s + tail_s ].

busy_s: m micro-batches x the rank's per-micro-batch work as the breakdown counts it
(:func:`simulator.schedule.dual_timeline.rank_costs`); an overlapped forward-backward pair (DualPipe, DualPipeV)
hides at most (1 - interference) of each side's exposed EP seconds, never compute, so busy_s >= m (F_s + B_s -
(1 - interference) (ep of F_s + ep of B_s)) with F, B the totals (compute, recompute, exposed communication, host).
r_s, the release of rank s: its first op waits for the first micro-batch's forward on every rank between it and
the rank where that forward enters the pipeline (phase 0 enters at rank 0 and flows to higher ranks; phase 1 of a
V turns at the last rank; DualPipe's second copy enters at the last rank and flows down), each at least its
forward seconds less what a pair could hide, so r_s >= sum_{j<s} f_j (ZB-H1, ZB-V, DualPipeV) and
r_s >= min(sum_{j<s} f_j, sum_{j>s} f_j) (DualPipe, f_j its smaller phase). Without a split schedule (the replay
of whole backwards) the bound keeps r_s = 0 and compute only: m (forward compute + backward compute + recompute).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.pricing.overlap import coefficients
from simulator.schedule.dual_timeline import half_total, phase_costs, rank_costs
from simulator.schedule.step import StepParts
from simulator.schedule.tails import stage_tail
from simulator.search.rank import OBJECTIVES

#: the rejection reason of a plan pruned by the bound
BOUND_REASON = "bound: a plan timed alone whose step time is provably worse than the search's exact_top-th plan"

#: plans of a search ranked exactly by default (``search(exact_top=...)``; None: every plan is timed)
EXACT_TOP = 10

#: objectives the bound applies to (step time, and tokens per second per GPU: a function of it)
BOUNDED = ("step_time", "tokens_per_s_per_gpu")

#: the bound prunes only beyond rounding (the breakdown's sums and the replay's add in other orders)
MARGIN = 1e-9


@dataclass(frozen=True)
class Bound:
    """The objective's threshold: the ``exact_top``-th best value among the plans timed without the replay."""

    column: str
    larger: bool
    threshold: float

    def excludes(self, lower_step_s: float, tokens_per_step: float, gpus: int) -> bool:
        """Whether a plan whose step takes at least ``lower_step_s`` is certainly worse than the threshold."""
        if self.column == "step_s":
            return lower_step_s > self.threshold * (1 + MARGIN)
        best = tokens_per_step / lower_step_s / gpus      # tokens per second per GPU: at most this
        return best < self.threshold * (1 - MARGIN)


def reachable(lower_step_s: float, tokens_per_step: float, gpus: int, larger: bool) -> float:
    """The best objective value a plan whose step takes at least ``lower_step_s`` could reach, as a sort key (smaller
    first): the step's lower bound, or (``larger``: tokens per second per GPU) minus its upper bound, tokens /
    lower / GPUs (-inf without a bound)."""
    if not larger:
        return lower_step_s
    return -tokens_per_step / lower_step_s / gpus if lower_step_s > 0 else -math.inf


def timed_alone(schedule) -> bool:
    """Whether plans of ``schedule`` are timed one at a time (no batched evaluator): the split schedules (F, B, W
    orders) and those without a fast evaluator."""
    return schedule.fast is None or schedule.replay == "split"


def bound_of(rows: list[dict[str, Any]], objective: str, exact_top: int | None) -> Bound | None:
    """The threshold of ``rows`` (the plans timed in batches), or None (no pruning) when fewer than
    ``exact_top`` of them, ``exact_top`` is None, or the objective is a whole-run figure (days, cost, energy: its
    columns come after the ranking's rows are complete, and the bound is on the step)."""
    if exact_top is None or len(rows) < exact_top or objective not in BOUNDED:
        return None
    column, larger = OBJECTIVES[objective]
    values = sorted((r[column] for r in rows), reverse=larger)
    return Bound(column, larger, values[exact_top - 1])


def step_lower_bound(parts: StepParts, enough=None) -> float:
    """A lower bound of the step time of ``parts`` (module docstring), in seconds. ``enough(lower)``: where it holds
    for the bound without the ranks' tails (a lower one, cheaper: no tail is priced), that one is returned (the
    caller needs no tighter one: e.g. the threshold already excludes it)."""
    ctx, plan = parts.ctx, parts.ctx.plan
    chunks, schedule = parts.chunks, plan.schedule
    m, seen, out = plan.num_microbatches, {}, 0.0
    hide = 1.0 - coefficients()["overlap_interference"]
    split = schedule.replay == "split"
    if split and 0.0 <= hide <= 1.0:
        forward, busy = rank_seconds(schedule, chunks, hide)
        release = releases(schedule, forward)
    else:            # compute only (per rank as the breakdown counts it, for a split schedule)
        ranks = rank_costs(schedule, phase_costs(schedule, chunks)) if split else chunks
        busy = [sum(f.compute + b.compute + b.recompute for f, b in c) for c in ranks]
        release = [0.0] * plan.parallel.pp
    if enough is not None:
        lower = max(r + m * b for r, b in zip(release, busy, strict=True))
        if enough(lower):
            return lower
    phases = phase_costs(schedule, chunks) if split and not schedule.v_shape else None
    for s in range(plan.parallel.pp):
        signature = parts.signatures[s]      # middle stages of one signature share their tail (as finish_step)
        tail = seen.get(signature) if signature is not None else None
        if tail is None:
            if split:     # the rank's per-micro-batch costs as the breakdown counts them (only where needed)
                rank = phase_costs(schedule, [chunks[s]])[0] if phases is None else phases[s]
                stage = rank_costs(schedule, [rank])[0]
            else:
                stage = chunks[s]
            exposed, optimizer, _ = stage_tail(ctx, s, stage, 0.0, parts.slowest, False)
            tail = sum(exposed.values()) + optimizer
            if signature is not None:
                seen[signature] = tail
        out = max(out, release[s] + m * busy[s] + tail)
    return out


def rank_seconds(schedule, chunks: list, hide: float) -> tuple[list, list]:
    """Per rank of a split schedule: the seconds of a forward of each phase and of one micro-batch's work (as
    :func:`~simulator.schedule.dual_timeline.rank_costs` weighs the phases), each less what overlapped pairs
    could hide (``hide`` x the exposed EP seconds); from the numbers alone (no Cost built: a V's halves by
    :func:`~simulator.schedule.dual_timeline.half_total`)."""
    def whole(cost) -> float:
        return cost.total - hide * cost.exposed["ep"]

    def half(cost) -> float:
        return half_total(cost) - hide * cost.exposed["ep"] / 2

    pp = len(chunks)
    if not schedule.mirrored:       # a rank's seconds from its own chunk costs: once per cost list (the middle
        seen: dict[int, tuple] = {}     # stages of one signature share theirs, simulator.schedule.chunks)
        for c in chunks:
            if id(c) not in seen:
                f, b = c[0]
                if schedule.v_shape:    # both phases halves of the rank's own stage, every micro-batch runs both
                    seen[id(c)] = ((half(f),), 2 * (half(f) + half(b)))
                else:                   # ZB-H1: one phase
                    seen[id(c)] = ((whole(f),), whole(f) + whole(b))
        return [seen[id(c)][0] for c in chunks], [seen[id(c)][1] for c in chunks]
    forward, busy = [], []
    for s in range(pp):              # DualPipe: stage s (phase 0) and pp - 1 - s (phase 1), m / 2 each
        (f0, b0), (f1, b1) = chunks[s][0], chunks[pp - 1 - s][0]
        forward.append((whole(f0), whole(f1)))
        busy.append(0.5 * (whole(f0) + whole(b0)) + 0.5 * (whole(f1) + whole(b1)))
    return forward, busy


def releases(schedule, forward: list[tuple[float, ...]]) -> list[float]:
    """Per rank, a lower bound of its first op's start (module docstring): the forwards of the ranks before it
    (``forward``: per rank, its phases' forward seconds: floats, or arrays of many plans' at once)."""
    f = [functools.reduce(np.minimum, x) for x in forward]      # (np.minimum: the seconds may be arrays)
    below = list(itertools.accumulate(f, initial=0.0))          # below[s] = sum_{j<s} f_j
    if not schedule.mirrored:
        return below[:-1]
    total = below[-1]
    return [np.minimum(below[s], total - below[s + 1]) for s in range(len(f))]
