"""The fast path: memory first, then the step time of every valid plan, timelines batched across plans.

For each candidate (docs/search.md, "The fast path"):
1. the plan rules (:func:`simulator.plan.resolve_plan`) decide validity; a rejected candidate keeps its reason;
2. memory (:func:`simulator.memory.estimate_memory` of the stages that bound the peak,
   :func:`simulator.memory.estimate.bounding_stages`, for the first plan of a group that differs only in
   micro-batch and sharding; the peak's coefficients, :mod:`simulator.memory.scaling`, for the others) prunes
   plans whose device peak plus the headroom exceeds HBM, before any time is computed;
3. the chunk costs of the step (:func:`simulator.schedule.step.prepare_step`, the same code ``simulate()`` runs);
4. the pipeline timelines of all plans of one ``(schedule, pp, vpp, micro-batches)`` together, without the event
   replay (:mod:`simulator.schedule.fast_timeline`: GPipe in closed form, 1F1B by its steady state, both exact
   and flat in micro-batches); a plan
   whose MoE layers overlap two micro-batches (``moe.microbatch_overlap``) falls back to the replay, the only
   timeline that pairs them; a DualPipe / DualPipeV / ZB-H1 / ZB-V plan is timed alone by the steady state of
   its F, B, W graph (:mod:`simulator.schedule.split_steady`), a schedule without ``fast`` by the replay;
   the ``timeline`` column says so (``replay (dualpipev)``);
5. the step's tail and breakdown (:func:`simulator.schedule.step.finish_step`, the same code again).

So a plan's numbers equal ``simulate()``'s (a hypothesis test checks 1e-9 relative); only the timeline differs
in how it is computed.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.errors import UserError
from simulator.hardware.calibration import calibration_of
from simulator.memory.estimate import bounding_stages, estimate_memory, fixed_bytes, state_floor_bytes
from simulator.memory.items import MemoryReport
from simulator.memory.nccl import nccl_bytes
from simulator.memory.offload import offloaded_activation_bytes
from simulator.memory.runtime import ALLOCATOR_CACHE_BYTES, RUNTIME_BYTES
from simulator.memory.scaling import PeakOnly, peak_by_micro_batch
from simulator.plan import moe_backend
from simulator.scenario.load import Fixed
from simulator.schedule.cache import StepCache
from simulator.schedule.fast_timeline import FAST_LABELS, fast_timelines_many
from simulator.schedule.step import StepParts, fast_or_replay, finish_step, prepare_step, replay_timelines
from simulator.search.bound import BOUND_REASON, Bound, step_lower_bound
from simulator.search.caches import without_cycle_collector
from simulator.search.evaluated import OOM_REASON, Evaluated
from simulator.search.resolving import BUILT_CACHE, kept_rules, plan_key, reason_for, resolved
from simulator.search.resolving import resolve as resolve  # (its public name here, as before round 10)
from simulator.search.space import INNER, OUTER, TIME_ONLY, Space
from simulator.topology import topology_of
from simulator.traffic import DIMS

#: candidates whose timelines are evaluated together (bounds the memory held by prepared plans); as large as an
#: executor's shard, so that plans of one timeline structure spread over a shard share one evaluation
BATCH = 2048

#: the states floor prunes only when it exceeds the capacity by more than rounding (the floor adds a subset of the
#: peak's items in another order)
FLOOR_MARGIN = 1e-9
RUNTIME = RUNTIME_BYTES + ALLOCATOR_CACHE_BYTES

@dataclass
class Context:
    """What evaluating a plan reads besides the plan: the fixed scenario parts, the topology and calibration."""

    fixed: Fixed
    space: Space
    headroom_bytes: float

    def __post_init__(self) -> None:
        self.topology = topology_of(self.fixed.cluster)
        self.calibration = calibration_of(self.fixed.calibration_path) if self.fixed.calibration_path else None
        self.capacity = self.fixed.cluster.node.gpu.memory.capacity
        self.moe_backend = moe_backend(self.fixed.moe.backend)
        self.mb_dependent_nccl = self.moe_backend.buffer_per_micro_batch   # DeepEP's buffer holds a micro-batch
        self.step_cache = StepCache()   # the step's pure functions by their arguments, shared by the plans
        self.built: dict = {}           # the host-memory verdicts (:func:`_verdict`), bounded
        self.bound_parts: dict = {}     # the memory bound's per-context parts (search/memory_bound.py)
        self.keyed: dict = {}           # per plan_key: validated ParallelPlan, batch-free rules, recipe, offload
        self.trainings: dict = {}       # TrainingConfig per micro-batch
        self.batches: dict = {}         # micro-batch count or UserError per (mb, dp, pp, vpp, schedule)
        self.switches: dict = {}        # check_switches' verdict per (pp, offload, recompute, sharding)
        self.inner: dict = {}           # inner combinations passing check_switches per mb, rejections, per (pp, flags)
        self.reasons: dict = {}         # reason_of per kept UserError
        self.recipes: dict = {}         # Recipe per sharding switches (zero, distributed_optimizer, megatron_fsdp)
        self.peaks: dict = {}           # coefficients of the device peak, per point without sharding and micro-batch
        self.fixed_bytes: dict = {}     # fixed bytes and states floor per stage, per point without recompute, mb
        self.nccl_floor: dict = {}      # bounding stages per point without sharding
        self.nccl: dict = {}            # NCCL's bytes per stage, per outer point and gradient reduction
        self.bounded: dict = {}         # id(point) -> (point, parts, memory) of a plan whose lower bound is waiting


def _monotone(plan) -> bool:
    """Whether the device peak of ``plan`` cannot fall when only its micro-batch grows (docs/search.md, "Memory
    first": activations scale with b and are held for min(w + 1, m v) / v micro-batches, GPipe m, m = global batch
    / (b dp); the rest does not read b). Not so for a recipe that frees gradients between steps, nor inference."""
    return plan.training.mode == "train" and not plan.recipe.grads_freed_between_steps


#: prepared plans whose lower bound waits on the best-first heap kept for their timing (a pp 64 plan's chunk costs
#: are ~10^2 KB: at most ~50 MB)
BOUNDED_KEPT = 512

#: ... and but the values that change only the step time (:data:`~simulator.search.space.TIME_ONLY`): the key under
#: which a smaller micro-batch's overflow and a point's fixed bytes are kept (plans equal on it have one memory)
_MEMORY = (*OUTER, *(k for k in INNER if k != "micro_batch" and k not in TIME_ONLY))
_REST = operator.itemgetter(*_MEMORY)
#: of a ``_REST`` tuple, all but the sharding (the key of a group of plans that share the peak's coefficients)
_CORE = operator.itemgetter(*(i for i, k in enumerate(_MEMORY) if k != "sharding"))
#: ... all but the recompute choice: the key of the model states and buffers (:func:`_states`)
_STATES = operator.itemgetter(*(i for i, k in enumerate(_MEMORY) if k != "recompute"))


def _prepare(ctx: Context, point: dict[str, Any], out: Evaluated, overflow: dict[tuple, int]
             ) -> tuple[dict, StepParts, Any] | None:
    """Rules, memory and (when it fits) the step's chunk costs of one candidate; ``overflow``: per point without
    its micro-batch, the smallest micro-batch whose plan overflowed HBM by more than rounding with a peak that
    grows with the micro-batch (:func:`_monotone`): a larger one overflows too, and its memory is not built."""
    out.evaluated += 1
    if (kept := ctx.bounded.pop(id(point), None)) is not None and kept[0] is point:
        return kept             # prepared when its lower bound was (_lower_bounds): the same plan, parts and memory
    key = plan_key(ctx, point)
    if isinstance(plan := kept_rules(ctx, key), UserError):     # a kept rejection: no resolving
        out.rejected[reason_for(ctx, plan)] += 1
        return None
    try:
        plan = resolved(ctx, point, key)
    except UserError as exc:
        plan = exc
    if isinstance(plan, UserError):     # a kept verdict (returned) or the timeline's or host's rule (raised)
        out.rejected[reason_for(ctx, plan)] += 1
        return None
    rest, mb = _REST(point), point["micro_batch"]
    if overflow.get(rest, mb) < mb:
        out.rejected[OOM_REASON] += 1        # a smaller micro-batch of this plan already overflowed
        return None
    memory = _memory(ctx, plan, rest, mb)
    floor = isinstance(memory, float)
    if floor or memory.device_peak_bytes + ctx.headroom_bytes > ctx.capacity:
        out.rejected[OOM_REASON] += 1
        peak = memory if floor else memory.device_peak_bytes
        if out.least_oom is None or peak <= out.least_oom[0]:        # (its place only where it can matter)
            out.note_oom(peak, not floor, plan, point["sharding"], ctx.space.place(point))
        if _monotone(plan) and (floor or (memory.device_peak_bytes + ctx.headroom_bytes)
                                * (1 - FLOOR_MARGIN) > ctx.capacity):
            overflow[rest] = min(mb, overflow.get(rest, mb))
        return None
    parts = prepare_step(ctx.fixed.model, plan, ctx.topology, calibration=ctx.calibration, moe=ctx.fixed.moe,
                         gpu_speed_sigma=ctx.fixed.system.gpu_speed_sigma, cache=ctx.step_cache,
                         offload_activation_bytes=offloaded_activation_bytes(plan))
    return point, parts, memory


def _memory(ctx: Context, plan, rest: tuple, mb: int) -> MemoryReport | PeakOnly | float:
    """The device peak of a candidate that passed the rules, or when its model states alone overflow HBM a lower
    bound of that peak in bytes (the states, NCCL's buffers and the runtime).

    The first plan of a group that differs only in micro-batch and sharding builds its report
    (:func:`estimate_memory` of the bounding stages) and the group's coefficients of the peak
    (:func:`peak_by_micro_batch`); the others evaluate those with their sharding's fixed bytes, unless their peak
    is within rounding (1e-9 relative) of the capacity, where their own report decides (so the verdicts are the
    reports')."""
    # the per-micro-batch bytes follow the sharding only through AMP's fp32 residual stream (autocast below
    # ZeRO-3, simulator/memory/activations.py), so that joins the group's key
    core = (_CORE(rest), plan.recipe.amp_casts)
    coefficients = ctx.peaks.get(core)
    if coefficients is not None:
        # the plan's own fixed and NCCL bytes: both follow the sharding (NCCL's through NVLS-tree)
        memory = coefficients.peak(mb, plan.num_microbatches, _states(ctx, plan, rest, coefficients.stages),
                                   stage_nccl(ctx, plan, rest, coefficients.stages, mb))
        if abs(memory.device_peak_bytes + ctx.headroom_bytes - ctx.capacity) > FLOOR_MARGIN * ctx.capacity:
            return memory
    # what bounding_stages reads (not the sharding nor the micro-batch)
    floor_key = (core, plan.recipe.eager)
    if (stages := ctx.nccl_floor.get(floor_key)) is None:
        if len(ctx.nccl_floor) >= BUILT_CACHE:
            ctx.nccl_floor.clear()
        stages = ctx.nccl_floor[floor_key] = bounding_stages(plan)
    nccl = min(stage_nccl(ctx, plan, rest, stages, mb))
    floor = _states(ctx, plan, rest, stages, True) * (1 - FLOOR_MARGIN) + nccl + RUNTIME
    if floor + ctx.headroom_bytes > ctx.capacity:
        return floor       # the model states and NCCL's buffers alone do not fit: no need for the items
    report = estimate_memory(plan, hbm_capacity_bytes=ctx.capacity, stages=stages, cluster=ctx.fixed.cluster)
    if core not in ctx.peaks and _monotone(plan):     # (gradients freed between steps: not a sum of the items)
        if len(ctx.peaks) >= BUILT_CACHE:    # bounded: the shardings and micro-batches of a point come together
            ctx.peaks.clear()
        p = plan.parallel
        ctx.peaks[core] = peak_by_micro_batch(report, mb, plan.num_microbatches, p.schedule, p.pp, p.vpp)
    return report


def _states(ctx: Context, plan, rest: tuple, stages: tuple[int, ...], floor: bool = False):
    """:func:`fixed_bytes` (or ``floor``: :func:`state_floor_bytes`) of ``plan`` on ``stages``, once per point
    without its recompute choice and micro-batch (``_STATES``; the floor also by whether m = 1): they read the
    stages' parameters (the layout: pp, vpp, split, schedule), the recipe (sharding, framework, precision), the shard
    degrees (dp, cp, Ulysses, ep), the offload's GPU shares and (the floor) whether gradients are freed at m = 1,
    not the recompute modes, the TP overlap nor the micro-batch (activations and time only)."""
    key = (floor, _STATES(rest), stages, floor and plan.num_microbatches == 1)
    if (got := ctx.fixed_bytes.get(key)) is None:
        if len(ctx.fixed_bytes) >= BUILT_CACHE:
            ctx.fixed_bytes.clear()
        got = ctx.fixed_bytes[key] = (state_floor_bytes if floor else fixed_bytes)(plan, stages)
    return got


def stage_nccl(ctx: Context, plan, rest: tuple, stages: tuple[int, ...], mb: int) -> tuple[float, ...]:
    """NCCL's bytes of ``plan`` on ``stages`` (:func:`simulator.memory.nccl.nccl_bytes`) once per outer point,
    gradient reduction and framework: its ``CommunicatorInputs`` read of a point the rank grid, pp, vpp, SP and the
    schedule (outer values) and whether gradients are all-reduced; DeepEP's buffer the micro-batch too."""
    key = (rest[:len(OUTER)], stages, plan.recipe.stage == 0, plan.recipe.eager,
           mb if ctx.mb_dependent_nccl else None)
    if (got := ctx.nccl.get(key)) is None:
        if len(ctx.nccl) >= BUILT_CACHE:
            ctx.nccl.clear()
        got = ctx.nccl[key] = tuple(nccl_bytes(plan, ctx.fixed.cluster, s).total for s in stages)
    return got


def _row(point: dict[str, Any], parts: StepParts, memory, timelines, how: str) -> dict[str, Any]:
    plan = parts.ctx.plan
    step = finish_step(parts, timelines, comm_table=False)
    p = plan.parallel
    row = {"gpus": plan.world_size, "tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "ulysses": p.ulysses,
           "ep": p.ep, "dp": plan.dp, "sp": p.sp, "schedule": p.schedule, "split": point["split"],
           "pipeline_layers": p.pipeline_layers,
           "tp_comm_overlap": p.tp_comm_overlap, "offload": point["offload"], "recompute": p.recompute,
           "recompute_modules": ",".join(sorted(p.recomputed_modules)), "sharding": point["sharding"],
           "micro_batch": plan.training.micro_batch, "micro_batches": plan.num_microbatches,
           "global_batch": plan.training.global_batch, "seq_len": plan.training.seq_len,
           "step_s": step.step_s, "peak_bytes": memory.peak_bytes, "device_peak_bytes": memory.device_peak_bytes,
           "mfu": step.mfu, "tokens_per_s": step.tokens_per_s,
           "tokens_per_s_per_gpu": step.tokens_per_s / plan.world_size,
           "compute_s": step.compute_s, "recompute_s": step.recompute_s, "bubble_s": step.bubble_s,
           "optimizer_s": step.optimizer_s, "host_s": step.host_s, "offload_s": step.offload_s,
           "timeline": how}
    row.update({f"exposed_{d}_s": step.exposed_comm_s[d] for d in DIMS})
    return row


def evaluate_points(ctx: Context, points: list[dict[str, Any]], bound: Bound | None = None,
                    lower_only: bool = False) -> Evaluated:
    """Evaluate candidates in batches (module docstring); rows in candidate order. ``lower_only`` (implied by a
    ``bound``): no plan is timed; each that passes the rules and memory leaves its step's lower bound in
    ``bounds`` (:mod:`simulator.search.bound`), unless ``bound`` excludes it: then it is counted under
    :data:`~simulator.search.bound.BOUND_REASON` (the search times the rest best bound first,
    :func:`simulator.search.best_first.time_best_first`)."""
    with without_cycle_collector():
        if lower_only or bound is not None:
            return _lower_bounds(ctx, points, bound)
        return _evaluate_points(ctx, points)


def _lower_bounds(ctx: Context, points: list[dict[str, Any]], bound: Bound | None) -> Evaluated:
    out, overflow = Evaluated(), {}
    for point in points:
        item = _prepare(ctx, point, out, overflow)
        if item is None:
            continue
        plan = item[1].ctx.plan
        tokens, gpus = plan.training.global_batch * plan.training.seq_len, plan.world_size
        # the bound without the tails first: where that is excluded already, no tail is priced
        lower = step_lower_bound(item[1], enough=None if bound is None else
                                 lambda x, t=tokens, g=gpus: bound.excludes(x, t, g))
        if bound is not None and bound.excludes(lower, tokens, gpus):
            out.rejected[BOUND_REASON] += 1
        else:
            out.bounds.append((lower, tokens, gpus, point))
            keep_bounded(ctx, item)
    return out


def keep_bounded(ctx: Context, item: tuple[dict, StepParts, Any]) -> None:
    """Keep a prepared plan whose lower bound goes on the best-first heap, for its timing in this process if the
    order reaches it (:func:`_prepare` takes it back: the same plan, chunk costs and memory, not prepared twice)."""
    if len(ctx.bounded) >= BOUNDED_KEPT:      # most waiting plans are never timed
        ctx.bounded.clear()
    ctx.bounded[id(item[0])] = item


def _evaluate_points(ctx: Context, points: list[dict[str, Any]]) -> Evaluated:
    out, overflow = Evaluated(), {}
    for start in range(0, len(points), BATCH):
        prepared = [x for x in (_prepare(ctx, p, out, overflow) for p in points[start:start + BATCH]) if x is not None]
        groups: dict[tuple, list[int]] = {}
        timelines: dict[int, list] = {}
        how: dict[int, str] = {}
        for i, (_, parts, _) in enumerate(prepared):
            p, schedule = parts.ctx.plan.parallel, parts.ctx.plan.schedule
            if schedule.fast is None:   # no evaluator without the replay: only the replay
                timelines[i], how[i] = replay_timelines(parts), f"replay ({schedule.name})"
                continue
            if schedule.replay == "split":   # F, B, W orders: the steady state of their graph, plan by plan
                timelines[i], how[i] = fast_or_replay(parts), FAST_LABELS[schedule.fast]
                continue
            if parts.pairing() is not None:   # MoE micro-batch overlap pairs: only the replay runs them
                timelines[i], how[i] = replay_timelines(parts), "replay (MoE micro-batch overlap)"
                continue
            groups.setdefault((schedule, p.pp, p.vpp, parts.ctx.plan.num_microbatches), []).append(i)
        jobs = [(*structure, np.stack([prepared[i][1].duration_array() for i in members]))
                for structure, members in groups.items()]
        for (structure, members), job in zip(groups.items(), fast_timelines_many(jobs) if jobs else [], strict=True):
            label = FAST_LABELS[structure[0].fast]
            for i, tl in zip(members, job, strict=True):
                timelines[i], how[i] = tl, label
        out.rows += [_row(point, parts, memory, timelines[i], how[i])
                     for i, (point, parts, memory) in enumerate(prepared)]
    return out
