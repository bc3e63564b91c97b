"""Pruning whole groups by a bound before they are resolved (docs/search/time_to_answer.md, "Time to the answer",
rounds 4 and 6).

A *group* is the set of candidates of one outer point of the space (:data:`simulator.search.space.OUTER`: GPUs,
schedule, pp, vpp, split, tp, cp, Ulysses, ep, sp): its members differ only in the inner knobs (TP overlap,
offload, recompute, sharding, micro-batch). Its bound, and the bound of the members of each (recompute value,
micro-batch, TP overlap value) in it, is a lower bound of the step time of every such member that passes the rules:

    step(x) >= min over the compute variants k of x's micro-batch of T_k(x's recompute value, x's TP overlap),

T_k(r, o) (:func:`compute_lower`) a bound of the schedule's timeline when every forward of a chunk lasts only its
compute seconds plus the least exposed communication of its layers under TP overlap value o, and every backward
the same plus the re-run seconds of recompute value r (the slowest GPU's pace on compute and recompute), on the
variant's representative plan. Why it holds (points 4 and 5, the communication: :mod:`.exposed_bound`):

1. A chunk's ``compute`` seconds (:class:`~simulator.schedule.costs.Cost`) come from the layer, embedding and head
   times of its layers and the MoE layer of its stage (:class:`~simulator.schedule.inputs.LayerInputs`,
   :class:`~simulator.schedule.inputs.MoeInputs`), scaled by the slowest GPU's pace (the GPU count's): nothing
   of them reads the recompute mode (its seconds are ``recompute``, apart), the offload (host seconds and
   transfers), the TP overlap (it changes which communication is exposed) or the sharding beyond the recipe's
   compute fields (the eager framework's FSDP copies and AMP casts), all of which :class:`LayerInputs` holds. So
   two members with the same micro-batch and the same :class:`LayerInputs` (a *compute variant*) have the same
   chunk compute seconds; every member that passes the rules is in the variant of its micro-batch and layer
   inputs, whose representative is the first member of it that passes the rules.
2. A chunk's timeline duration is its ``total`` = compute + recompute + exposed communication + host, at least
   its compute plus its dense layers' re-run seconds plus its layers' least exposed communication (points 4 and
   5 of :mod:`.exposed_bound`), and every timeline the engine runs is a max-plus
   recurrence (an op ends at the latest of its predecessors' ends plus its duration:
   :mod:`simulator.schedule.fast_timeline`, equal to the replay), so each stage's end is non-decreasing in every
   duration: the ends with those smaller durations, and T_k (a bound of them: :func:`compute_lower`), are at most
   the member's.
   The split schedules (DualPipe, DualPipeV, ZB-H1, ZB-V) overlap forward-backward pairs; for them T_k is
   :mod:`simulator.search.bound`'s release-plus-busy bound of these smaller costs (no exposed EP seconds, so
   nothing a pair could hide), itself below the member's step. Plans whose MoE layers pair two micro-batches
   (``moe.microbatch_overlap``) get no bound (0): the pairing hides seconds across ops.
3. The step is the latest stage end plus that stage's tail (exposed per-step communication, the optimizer: both
   >= 0) (:func:`simulator.schedule.step.finish_step`), so it is at least the latest stage end.

Every group is evaluated by *parts*, the members of one (recompute value, micro-batch, TP overlap value) of a
group, best bound first (:func:`simulator.search.best_first.time_best_first`); a part is pruned (counted under
:data:`GROUP_REASON`, one per candidate, none of them resolved) only when its bound exceeds the threshold of
:class:`~simulator.search.bound.Bound`, the ``exact_top``-th best of the plans timed so far; such a threshold
exists only once ``exact_top`` plans fit and were timed, so a search where nothing fits never prunes a group by
time (the members whose device peak is provably above HBM are skipped apart: :mod:`.memory_bound`, the no-fit
report counting them). Each pruned member is
slower than ``exact_top`` timed plans, so the first ``exact_top`` plans are those of a search without the bound
(tests/search/test_group_bound.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from simulator.errors import UserError
from simulator.moe import DEFAULT_MOE_SETTINGS
from simulator.schedule.inputs import layer_inputs
from simulator.search.bound import rank_seconds, releases
from simulator.search.variants import Variant, recompute_seconds, variants_of

#: the rejection reason of a candidate whose whole group the bound pruned before resolving it
GROUP_REASON = ("bound: a group of plans (one outer structure) whose step time is provably worse than the "
                "search's exact_top-th plan (not resolved)")

#: candidates per round of :func:`~simulator.search.best_first.time_best_first` (whole items: a round may hold
#: more). The members that reach the rounds passed the inner rules (:mod:`.inner_rules`), so a round of 64 holds ~64
#: plans; a smaller round times fewer plans before the threshold tightens, a larger one batches more timelines
#: together. Cold whole-default-space searches, CPU s, rounds of 32 / 64 / 128 / 2,048 (2026-12-04 23:25 UTC, with
#: the inner rules, batched groups before split ones): 1T 1.17 / 1.22 / 1.22 / 2.38, (a) 0.56 / 0.58 / 0.59 / 1.20,
#: (c) 2.94 / 2.93 / 3.02 / 4.36, (d) 3.20 / 3.12 / 3.08 / 3.61; with the best-first order (23:35 UTC) 32 and 64
#: within noise of each other on the three Korthikanti problems
GROUP_ROUND = 64

#: rule rejections that depend only on the outer point and the micro-batch (the batch divisibility, the schedule's
#: count of micro-batches and the timeline size limit: :func:`simulator.plan.rules.check_batch`,
#: :func:`simulator.scenario.limits.check_timeline`)
BATCH_KEY = "training.global_batch"


_NO_EXPOSED = {"ep": 0.0, "pp": 0.0}


@dataclass
class Group:
    """The candidates of one outer point, and the bound of their step time (seconds; 0: none)."""

    outer: dict[str, Any]
    points: list[dict[str, Any]]
    lower: float = 0.0
    tokens: float = 0.0
    sub: dict[tuple[str, int, bool], float] = field(default_factory=dict)
    """the bound of the members of each (recompute value, micro-batch, TP overlap value) (:func:`set_lowers`); a
    key without one (no member of its micro-batch passes the rules) is not pruned"""
    rejected: list[UserError] = field(default_factory=list)
    """when no member passes the rules: each member's rejection (they were all resolved to find a representative)"""
    plans: dict[tuple[int, str], Any] = field(default_factory=dict)
    """the first member of each (micro-batch, sharding) that passes the rules (:mod:`.memory_bound`)"""
    variant_plan: dict[tuple[int, str], Any] = field(default_factory=dict)
    """per (micro-batch, sharding) with a plan, the representative of its compute variant (:func:`group_variants`)"""
    variants: list = field(default_factory=list)
    """its compute variants (:func:`set_lowers`), for :mod:`.dp_floor`"""
    dp_floor: dict[str, Any] = field(default_factory=dict)
    """per sharding, :mod:`.dp_floor`'s per-chunk DP seconds once computed (None: none)"""
    recompute_values: tuple[str, ...] = ()
    """its members' recompute values when it was bounded (:func:`set_lowers`)"""
    memory_parts: dict[Any, Any] = field(default_factory=dict)
    """what :func:`~simulator.search.memory_bound.memory_lowers` keeps across the keys it bounds"""
    rerun: dict[int, np.ndarray] = field(default_factory=dict)
    """per representative plan (by id; the group holds it), :func:`~simulator.search.variants.recompute_seconds` of ``recompute_values``"""
    refined: dict[tuple[int, bool, str], Any] = field(default_factory=dict)
    """per (micro-batch, TP overlap value, sharding), :mod:`.dp_floor`'s bound of each recompute value (None: none)"""


class _Seconds(NamedTuple):
    """A forward or backward of a variant's least seconds, as :func:`~simulator.search.bound.rank_seconds` reads a
    :class:`~simulator.schedule.costs.Cost` (its total: a float, or for a backward an array, one per recompute
    value; no exposed EP or pipeline seconds)."""

    total: Any
    exposed: dict = _NO_EXPOSED


def compute_lower(v: Variant, recompute: tuple[str, ...] = ("none",), r: np.ndarray | None = None,
                  floor: tuple[np.ndarray, np.ndarray] | None = None) -> list[float]:
    """Lower bounds of the step of the plans of compute variant ``v`` (module docstring), one per ``recompute``
    value (a search's ``recompute`` dimension: ``none``, ``full``, ``selective[:modules]``), whose re-run seconds
    of the dense layers join each backward; seconds. Split schedules: :mod:`simulator.search.bound`'s release plus
    busy seconds. The others (GPipe, 1F1B, interleaved): rank s's first op is a forward, which waits for the first
    model chunk's forward of its micro-batch on every rank below it; the rank then runs m x its chunks' forwards
    and backwards; its last op is a backward of some chunk c, after which that micro-batch's backward of chunk c
    still runs on every rank below it (the engine's timeline has no transfer lag: each wait is at least the ops'
    seconds):

        step >= max_s [ sum_{j<s} f_{j,0} + m sum_c (f_{s,c} + b_{s,c} + r_{s,c}) + min_c sum_{j<s} b_{j,c} ].

    For equal stages it is the schedule's whole fill and drain, (p - 1)(f + b) / v per chunk. ``floor``: per stage
    and chunk, seconds a forward and a backward last at least besides (:mod:`simulator.search.dp_floor`); each
    duration above is then the larger of the two, and a split schedule's work per micro-batch at least
    :func:`split_floor`'s."""
    schedule, m = v.plan.schedule, v.plan.num_microbatches
    if v.paired:
        return [0.0] * len(recompute)
    f, b = v.f, v.b
    r = recompute_seconds(v, recompute) if r is None else r         # (values, pp, vpp)
    if schedule.replay == "split":     # every recompute value at once: a backward's total is an array of them
        extra = np.moveaxis(r, 0, -1)                                # (pp, vpp, values)
        chunks = [[(_Seconds(fx), _Seconds(bx + e)) for fx, bx, e in zip(fr, br, er, strict=True)]
                  for fr, br, er in zip(f.tolist(), b.tolist(), extra, strict=True)]
        forward, busy = rank_seconds(schedule, chunks, 0.0)
        if floor is not None:         # a rank's work per micro-batch is at least its ops' floors
            busy = [np.maximum(w, x) for w, x in zip(busy, split_floor(schedule, floor), strict=True)]
        return list(np.max([a + m * w for a, w in zip(releases(schedule, forward), busy, strict=True)], axis=0))
    if floor is None:
        busy = (f + b).sum(axis=1) + r.sum(axis=2)                 # (values, pp)
    else:          # each forward at least its floor, each backward (with its re-run) too
        f, back = np.maximum(f, floor[0]), np.maximum(b + r, floor[1])     # back: (values, pp, vpp)
        busy, b = f.sum(axis=1) + back.sum(axis=2), np.maximum(b, floor[1])
    if schedule.fast is None:     # the replay only: each stage's own work, one after another
        return list((m * busy).max(axis=1))
    release = np.concatenate(([0.0], np.cumsum(f[:-1, 0])))
    drain = np.concatenate((np.zeros((1, b.shape[1])), np.cumsum(b[:-1], axis=0))).min(axis=1)
    return list((release + m * busy + drain).max(axis=1))


def split_floor(schedule, floor: tuple[np.ndarray, np.ndarray]) -> list[float]:
    """Per rank of a split schedule (one chunk per stage), the least seconds of one micro-batch's work given each
    stage's forward and backward floor (:mod:`simulator.search.dp_floor`), as
    :func:`~simulator.schedule.dual_timeline.rank_costs` weighs the phases: a V (DualPipeV, ZB-V) runs both halves
    of its stage's forward and backward (their seconds add to at least the stage's: each half is half of everything
    but the pipeline transfers, which it keeps whole); DualPipe half of its own stage's and half of its mirror's
    (pp - 1 - s); ZB-H1 its stage's. Valid where overlapped pairs hide nothing (no EP seconds): the caller's
    condition."""
    per = floor[0][:, 0] + floor[1][:, 0]
    if schedule.mirrored:
        return list(0.5 * (per + per[::-1]))
    return list(per)


def group_variants(ctx, group: Group, resolve) -> list[Variant]:
    """One :class:`Variant` per compute variant of ``group`` (module docstring; ``group.lower`` is the least of
    their :func:`compute_lower`) and the group's tokens per step; ``resolve(ctx, point)`` the search's.

    The layer inputs of a member are a function of the outer point, its micro-batch and its sharding (the recipe
    reads only the sharding of the inner knobs), so the first member of each (micro-batch, sharding) that passes
    the rules stands for all of them; a micro-batch that the batch rules reject (:data:`BATCH_KEY`: a function of
    the outer point and the micro-batch) is not tried again. A group none of whose members passes the rules keeps
    each member's rejection in ``group.rejected`` (its bound is then infinite: it has no plan)."""
    settings = ctx.fixed.moe or DEFAULT_MOE_SETTINGS
    gpu = ctx.topology.cluster.node.gpu
    variants: dict[tuple, Any] = {}
    found: set[tuple] = set()
    dead: set[int] = set()         # micro-batches every member of which the batch rules reject
    errors: list[UserError | None] = []
    for point in group.points:
        mb = point["micro_batch"]
        if mb in dead or (mb, point["sharding"]) in found:
            errors.append(None)
            continue
        try:
            plan = resolve(ctx, point)
        except UserError as exc:
            errors.append(exc)
            if exc.key_path == BATCH_KEY:
                dead.add(mb)
            continue
        errors.append(None)
        found.add((mb, point["sharding"]))
        group.plans[mb, point["sharding"]] = plan
        group.variant_plan[mb, point["sharding"]] = variants.setdefault(
            (mb, layer_inputs(plan, plan.gemm_dtype(gpu), settings)), plan)
    if not variants:           # every member rejected: their reasons, as evaluating them would count them
        group.rejected = [exc if exc is not None else _error(resolve, ctx, point)
                          for exc, point in zip(errors, group.points, strict=True)]
        group.lower = math.inf
        return []
    plan = next(iter(variants.values()))
    group.tokens = plan.training.global_batch * plan.training.seq_len
    overlaps = dict.fromkeys(map(itemgetter("tp_comm_overlap"), group.points))
    return [v for (_, li), plan in variants.items() for v in variants_of(ctx, plan, tuple(overlaps), li)]


def set_lowers(groups: list[Group], variants: list[list[Variant]]) -> None:
    """Each group's bound per (recompute value, micro-batch, TP overlap value), the least over the compute variants
    of that micro-batch and overlap value of :func:`compute_lower` (``Group.sub``), and the group's, the least of
    those."""
    for g, v in zip(groups, variants, strict=True):
        g.variants = v
        values = g.recompute_values = tuple(dict.fromkeys(map(itemgetter("recompute"), g.points)))
        rerun = g.rerun                        # the variants of one representative share its re-run seconds
        for variant in v:
            if id(variant.plan) not in rerun:
                rerun[id(variant.plan)] = recompute_seconds(variant, values)
        for variant, lowers in zip(v, _lowers_of(v, values, rerun), strict=True):
            mb = variant.plan.training.micro_batch
            for value, lower in zip(values, lowers, strict=True):
                key = (value, mb, variant.overlap)
                g.sub[key] = min(g.sub.get(key, math.inf), lower)
        if v:
            g.lower = min(g.sub.values())


def _lowers_of(v: list[Variant], values: tuple[str, ...], rerun: dict[int, np.ndarray]) -> list:
    """:func:`compute_lower` of each variant of one group (one schedule): for a schedule with a fast evaluator and
    no paired MoE layers, all the variants at once (the same operations on stacked arrays: the same bounds, one
    numpy call each instead of one per variant; a split schedule's ranks' seconds as arrays over the variants)."""
    if not v:
        return []
    schedule = v[0].plan.schedule
    if schedule.fast is None or any(x.paired for x in v):
        return [compute_lower(x, values, rerun[id(x.plan)]) for x in v]
    f, b = np.stack([x.f for x in v]), np.stack([x.b for x in v])                    # (V, pp, vpp)
    r = np.stack([rerun[id(x.plan)] for x in v])                                      # (V, values, pp, vpp)
    m = np.array([x.plan.num_microbatches for x in v], dtype=float)[:, None, None]
    if schedule.replay == "split":     # compute_lower's release plus busy, each second an array over the variants
        chunks = [[(_Seconds(f[:, s, 0, None]), _Seconds(b[:, s, 0, None] + r[:, :, s, 0]))] for s in range(f.shape[1])]
        forward, busy = rank_seconds(schedule, chunks, 0.0)
        return np.max([a + m[:, 0] * w for a, w in zip(releases(schedule, forward), busy, strict=True)],
                      axis=0).tolist()
    busy = (f + b).sum(axis=2)[:, None, :] + r.sum(axis=3)                           # (V, values, pp)
    release = np.concatenate((np.zeros((len(v), 1)), np.cumsum(f[:, :-1, 0], axis=1)), axis=1)
    drain = np.concatenate((np.zeros((len(v), 1, b.shape[2])), np.cumsum(b[:, :-1], axis=1)), axis=1).min(axis=2)
    return (release[:, None, :] + m * busy + drain[:, None, :]).max(axis=2).tolist()


def part_key(point: dict[str, Any]) -> tuple[str, int, bool]:
    """The (recompute value, micro-batch, TP overlap value) of ``point``: its key in ``Group.sub``."""
    return point["recompute"], point["micro_batch"], point["tp_comm_overlap"]


def _error(resolve, ctx, point) -> UserError:
    """The rule that rejects ``point`` (a member of a group with no plan)."""
    try:
        resolve(ctx, point)
    except UserError as exc:
        return exc
    raise AssertionError("a member of a group without plans passed the rules")     # pragma: no cover
