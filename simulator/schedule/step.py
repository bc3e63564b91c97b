"""One training step of a plan on a topology: :func:`simulate_step`.

1. Compute: each distinct layer kind (dense / MoE) is timed once (:func:`simulator.pricing.compute.layer_time`),
   plus the embedding (first stage) and output head (last stage).
2. Traffic: :func:`simulator.traffic.step_traffic` lists every comm op; :class:`GroupTimer` times each on its
   group's GPUs with the collectives model.
3. Chunk costs: forward and backward of each model chunk per micro-batch = compute + recompute + exposed comm
   (overlap rules in :mod:`simulator.pricing.overlap`); EP dispatch/combine are traffic ops priced by the MoE
   backend model, and MoE layers with EP > 1 take the busiest rank's expert GEMMs and the backend's overlap
   (:mod:`simulator.pricing.moe_layer`).
4. Pipeline: the stage end times of the schedule's op orders, by the schedule's evaluator without the event
   replay where it has one (:func:`fast_or_replay`: GPipe's closed form, 1F1B's steady-state extrapolation, flat in
   micro-batches) and by the replay (:func:`simulator.schedule.timeline.run_timeline`) otherwise; the replay's
   op list is made when a trace or plot asks for it (:meth:`StepResult.op_timelines`). Each stage then runs
   its tail: exposed DP gradient reduction, tied-embedding sync, optimizer step, eager parameter all-gather.
5. Step time = the latest stage end. The breakdown follows the stage that sets the pace: the busiest one (the
   most compute + recompute + exposed comm + optimizer; with balanced stages the last one to finish), its time
   split into compute, recompute, exposed comm per dimension, optimizer and bubble (the step's remaining idle
   time on that stage), which add up to the step time; ``StepResult.bottleneck`` names the stage and the resource
   that dominates it.

Where the parts live: the step's inputs as frozen value objects and the layer times (:mod:`.inputs`), chunk costs
(:mod:`.chunks`), tails and the comm table (:mod:`.tails`), and the one cache they share, keyed by those objects
(:mod:`.cache`: :class:`~simulator.schedule.cache.StepCache`, which a plan search keeps across plans and passes
to :func:`prepare_step`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from simulator.compute import ComputeEfficiency
from simulator.compute.gemm import peak_flops
from simulator.model import ModelSpec, model_flops
from simulator.moe import MoeSettings
from simulator.plan import ResolvedPlan, moe_backend
from simulator.pricing.overlap import coefficients
from simulator.schedule.cache import StepCache
from simulator.schedule.chunks import all_chunk_costs, middle_signatures
from simulator.schedule.costs import Cost, layer_costs
from simulator.schedule.dual_timeline import phase_costs, phase_seconds, rank_costs, run_dual_timeline
from simulator.schedule.fast_timeline import fast_timelines
from simulator.schedule.inputs import StepInputs, build_inputs
from simulator.schedule.result import StepResult
from simulator.schedule.split_steady import split_timelines
from simulator.schedule.stragglers import straggler_factor
from simulator.schedule.tails import comm_rows, p2p_s, stage_tail
from simulator.schedule.timeline import PairHiding, StageTimeline, run_timeline
from simulator.topology import Topology
from simulator.traffic import DIMS


@dataclass(frozen=True)
class StepParts:
    """Everything of a step but the pipeline timeline: the inputs, the MoE settings, the slowest GPU's pace and
    every stage's (forward, backward) chunk costs. :func:`finish_step` turns them and the stage timelines into the
    result."""

    ctx: StepInputs
    moe: MoeSettings | None
    slowest: float
    chunks: list[list[tuple[Cost, Cost]]]
    signatures: tuple[int | None, ...] = ()
    """:func:`simulator.schedule.chunks.middle_signatures` (computed once, read again by :func:`finish_step`)"""

    def durations(self) -> list[tuple[list[float], list[float]]]:
        """(forward, backward) seconds of each chunk of each stage, as the timeline takes them."""
        per_list: dict[int, tuple[list[float], list[float]]] = {}   # middle stages share their chunk lists
        for c in self.chunks:
            if id(c) not in per_list:
                per_list[id(c)] = ([f.total for f, _ in c], [b.total for _, b in c])
        return [per_list[id(c)] for c in self.chunks]

    def duration_array(self) -> np.ndarray:
        """:meth:`durations` as a ``(pp, vpp, 2)`` array (forward [..., 0], backward [..., 1])."""
        rows: dict[int, int] = {}       # each distinct chunk list's row (middle stages share theirs)
        distinct = []
        for c in self.chunks:
            if id(c) not in rows:
                rows[id(c)] = len(distinct)
                distinct.append([(f.total, b.total) for f, b in c])
        return np.array(distinct)[[rows[id(c)] for c in self.chunks]]

    def pairing(self) -> PairHiding | None:
        """The MoE micro-batch overlap of the timeline (``moe.microbatch_overlap``), or None."""
        moe, chunks = self.moe, self.chunks
        if not (moe is not None and moe.microbatch_overlap and any(t is not None for t in self.ctx.moe)):
            return None
        return PairHiding([[f.exposed["ep"] for f, _ in c] for c in chunks],
                          [[b.exposed["ep"] for _, b in c] for c in chunks],
                          [[f.compute for f, _ in c] for c in chunks],
                          [[b.compute + b.recompute for _, b in c] for c in chunks],
                          coefficients()["overlap_interference"])


def slowest_pace(gpus: int, gpu_speed_sigma: float | None, calibration_gpus: int) -> float:
    """The slowest of ``gpus`` GPUs' pace relative to the calibrated one (:func:`straggler_factor`), at the
    scenario's ``gpu_speed_sigma`` or, when None, the overlap coefficients' default."""
    sigma = coefficients()["gpu_speed_sigma"] if gpu_speed_sigma is None else gpu_speed_sigma
    return straggler_factor(gpus, sigma, calibration_gpus)


def prepare_step(model: ModelSpec, plan: ResolvedPlan, topology: Topology, *, calibration=None,
                 efficiency: ComputeEfficiency | None = None, moe: MoeSettings | None = None,
                 gpu_speed_sigma: float | None = None, cache: StepCache | None = None,
                 offload_activation_bytes: float = 0.0) -> StepParts:
    """Steps 1-3 of the module docstring (arguments as :func:`simulate_step`; ``cache``: the
    :class:`~simulator.schedule.cache.StepCache` the caller shares between plans (plan search), None: one of
    this step's own)."""
    plan = plan if moe is None else plan.with_moe_backend(moe_backend(moe.backend))  # the settings name the backend
    ctx = build_inputs(model, plan, topology, calibration, efficiency, moe, cache)
    if offload_activation_bytes:
        ctx = replace(ctx, offload_activation_bytes=offload_activation_bytes)
    slowest = slowest_pace(plan.world_size, gpu_speed_sigma, ctx.eff.calibration_gpus)
    signatures = middle_signatures(ctx)
    return StepParts(ctx, moe, slowest, all_chunk_costs(ctx, signatures, slowest), signatures)


def simulate_step(model: ModelSpec, plan: ResolvedPlan, topology: Topology, *, calibration=None,
                  efficiency: ComputeEfficiency | None = None, moe: MoeSettings | None = None,
                  gpu_speed_sigma: float | None = None, offload_activation_bytes: float = 0.0,
                  replay: bool = False, cache: StepCache | None = None) -> StepResult:
    """Time one training step of ``plan`` for ``model`` on ``topology`` (module docstring for the method).

    Args:
        model: the architecture (normally ``plan.model``).
        plan: a resolved plan; rank r runs on ``topology.gpus[r]``.
        topology: the cluster graph (at least ``plan.world_size`` GPUs).
        calibration: optional collectives :class:`~simulator.collectives.Calibration`.
        efficiency: compute coefficients (default: the shipped table of the GPU's architecture).
        moe: how MoE layers route and move tokens (the scenario's ``moe:`` section; its backend becomes the plan's);
            None: the plan's backend and the defaults (sequential, uniform routing). Ignored without MoE or ep 1.
        gpu_speed_sigma: relative spread of per-GPU speed (None: ``gpu_speed_sigma`` of data/overlap.yaml); the
            compute of the step runs at the expected slowest of the job's GPUs (:mod:`simulator.schedule.stragglers`).
        offload_activation_bytes: with activation offload (``parallel.cpu_offloading_num_layers``), the saved bytes
            its layers move to the host per micro-batch (:func:`simulator.memory.offload.offloaded_activation_bytes`).
        replay: time the pipeline by the event replay even where the schedule has a faster evaluator (the result's
            timelines then hold every op; otherwise the replay runs when :meth:`StepResult.op_timelines` is called).
        cache: a :class:`~simulator.schedule.cache.StepCache` the caller shares between plans on one model and
            topology (as :func:`prepare_step`; the multimodal searches keep one per submodule and GPU view); None: one
            of this step's own. A hit returns what the same code computed for an earlier plan.
    """
    parts = prepare_step(model, plan, topology, calibration=calibration, efficiency=efficiency, moe=moe,
                         gpu_speed_sigma=gpu_speed_sigma, offload_activation_bytes=offload_activation_bytes,
                         cache=cache)
    result = finish_step(parts, replay_timelines(parts) if replay else fast_or_replay(parts))
    return replace(result, replay=partial(replay_timelines, parts))


def fast_or_replay(parts: StepParts) -> list[StageTimeline]:
    """The stage timelines (ends and busy seconds, no op list) by the schedule's evaluator without the replay
    (``Schedule.fast``: :func:`simulator.schedule.fast_timeline.fast_timelines`; the schedules that split the
    backward: :func:`simulator.schedule.split_steady.split_timelines`), or the replay where it has none or MoE
    micro-batch overlap pairs a stage's ops (only the stage replay pairs them)."""
    schedule, p, m = parts.ctx.plan.schedule, parts.ctx.plan.parallel, parts.ctx.plan.num_microbatches
    if schedule.fast is None:
        return replay_timelines(parts)
    if schedule.replay == "split":     # F&B pairs are part of its orders: the evaluator prices them as the replay
        costs = phase_seconds(schedule, parts.chunks)
        return split_timelines(schedule, p.pp, m, costs, coefficients()["overlap_interference"])
    if parts.pairing() is not None:
        return replay_timelines(parts)
    return fast_timelines(schedule, p.pp, p.vpp, m, parts.duration_array()[None])[0]


def replay_timelines(parts: StepParts) -> list[StageTimeline]:
    """The event timeline of the plan's schedule (:func:`simulator.schedule.timeline.run_timeline`): the
    reference, and the only one that runs MoE micro-batch overlap pairs and the schedules that split the backward
    (bidirectional and zero-bubble: :func:`simulator.schedule.dual_timeline.run_dual_timeline`)."""
    p, schedule = parts.ctx.plan.parallel, parts.ctx.plan.schedule
    if schedule.replay == "split":
        costs = phase_seconds(schedule, parts.chunks)
        return run_dual_timeline(schedule.split_orders(p.pp, parts.ctx.plan.num_microbatches), costs,
                                 coefficients()["overlap_interference"])
    durations = parts.durations()
    return run_timeline(schedule.orders(p.pp, p.vpp, parts.ctx.plan.num_microbatches),
                        [f for f, _ in durations], [b for _, b in durations], 0.0, parts.pairing())


def finish_step(parts: StepParts, timelines: list[StageTimeline], comm_table: bool = True) -> StepResult:
    """Steps 4-5 of the module docstring from the chunk costs and each stage's timeline (the replay's, or
    :mod:`simulator.schedule.fast_timeline`'s); ``comm_table`` False (plan search) leaves the comm table, the
    per-chunk comm of the trace and the tail's trace events empty, and times the tail of middle stages of one
    signature once."""
    ctx, slowest, chunks = parts.ctx, parts.slowest, parts.chunks
    model, plan = ctx.model, ctx.plan
    p, m = plan.parallel, plan.num_microbatches
    if plan.schedule.replay == "split":   # a rank's work per micro-batch: its phases (dual_timeline.rank_costs)
        chunks = rank_costs(plan.schedule, phase_costs(plan.schedule, chunks))
    p2p = p2p_s(ctx)
    tails, seen = [], {}
    for s in range(p.pp):
        signature = None if comm_table else parts.signatures[s]
        if signature is None:
            tails.append(stage_tail(ctx, s, chunks[s], timelines[s].end_s, slowest, comm_table))
            continue
        if signature not in seen:      # the tail's times do not depend on its start; no events
            seen[signature] = stage_tail(ctx, s, chunks[s], 0.0, slowest, False)
        tails.append(seen[signature])
    comm_after: dict[int, float] = {}    # each distinct tail's exposed comm (middle stages share their tail)
    for tail in tails:
        if id(tail) not in comm_after:
            comm_after[id(tail)] = sum(tail[0].values())
    ends = [timelines[s].end_s + comm_after[id(tails[s])] + tails[s][1] for s in range(p.pp)]
    busy = [timelines[s].busy_s + comm_after[id(tails[s])] + tails[s][1] for s in range(p.pp)]
    k = max(range(p.pp), key=lambda s: busy[s])   # the busiest stage sets the pace of the pipeline
    total = Cost()
    for f, b in chunks[k]:
        total.add(f, m)
        total.add(b, m)
    exposed_comm = {d: total.exposed[d] + tails[k][0][d] for d in DIMS}
    exposed_comm["pp"] += timelines[k].wait_pp_s
    exposed_comm["ep"] -= timelines[k].pair_hidden_s
    step = max(ends)
    offload = tails[k][0].get("offload", 0.0)
    bubble = step - total.compute - total.recompute - total.host - sum(exposed_comm.values()) - tails[k][1] - offload
    per_list: dict[int, float] = {}     # middle stages of one signature share their chunk list: sum it once
    for c in chunks:
        if id(c) not in per_list:
            per_list[id(c)] = sum(f.flops + b.flops for f, b in c)
    flops = sum(per_list[id(c)] for c in chunks) * m / p.pp
    t = plan.training
    return StepResult(
        step_s=step, compute_s=total.compute, recompute_s=total.recompute, bubble_s=max(bubble, 0.0),
        host_s=total.host, offload_s=offload,
        optimizer_s=tails[k][1], exposed_comm_s=exposed_comm, tokens_per_s=t.global_batch * t.seq_len / step,
        model_flops_per_gpu=model_flops(model, t.seq_len, t.global_batch, causal=t.attention == "flash",
                                        attention=t.attention) / plan.world_size,
        hardware_flops_per_gpu=flops, peak_flops=peak_flops(ctx.gpu, ctx.dtype),
        comm=comm_rows(ctx, k) if comm_table else (),
        critical_stage=k, stage_end_s=tuple(ends), stage_busy_s=tuple(busy), timelines=tuple(timelines),
        chunk_comm_s=tuple(tuple((dict(f.comm, host=f.host), dict(b.comm, host=b.host)) for f, b in c)
                           for c in chunks) if comm_table else (),
        tail_events=tuple(e for tl in tails for e in tl[2]), p2p_s=p2p,
        moe=ctx.moe[k].summary() if ctx.moe[k] is not None else None)


def layer_step_times(model: ModelSpec, plan: ResolvedPlan, topology: Topology, *, layer_index: int = 0,
                     stage: int = 0, calibration=None, efficiency: ComputeEfficiency | None = None,
                     moe: MoeSettings | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of one layer for one micro-batch, comm and recompute included, as Korthikanti
    et al. 2023 Table 4 reports them."""
    ctx = build_inputs(model, plan, topology, calibration, efficiency, moe)
    kind = model.is_moe_layer(layer_index)
    fwd, bwd = layer_costs(ctx.layers[kind], ctx.traffic.layer, "moe" if kind else "dense", plan.parallel.recompute,
                           plan.parallel.cp, ctx.timer, stage, ctx.moe[stage] if kind else None,
                           plan.parallel.recomputed_modules)
    return fwd.total, bwd.total
