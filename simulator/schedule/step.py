"""One training step of a plan on a topology: :func:`simulate_step`.

1. Compute: each distinct layer kind (dense / MoE) is timed once (:func:`simulator.pricing.compute.layer_time`),
   plus the embedding (first stage) and output head (last stage).
2. Traffic: :func:`simulator.traffic.step_traffic` lists every comm op; :class:`GroupTimer` times each on its
   group's GPUs with the collectives model.
3. Chunk costs: forward and backward of each model chunk per micro-batch = compute + recompute + exposed comm
   (overlap rules in :mod:`simulator.pricing.overlap`); EP dispatch/combine are traffic ops priced by the MoE
   backend model, and MoE layers with EP > 1 take the busiest rank's expert GEMMs and the backend's overlap
   (:mod:`simulator.pricing.moe_layer`).
4. Pipeline: :func:`simulator.schedule.timeline.run_timeline` of the schedule's op orders; each stage then runs
   its tail: exposed DP gradient reduction, tied-embedding sync, optimizer step, eager parameter all-gather.
5. Step time = the latest stage end. The breakdown follows the stage that sets the pace: the busiest one (the
   most compute + recompute + exposed comm + optimizer; with balanced stages the last one to finish), its time
   split into compute, recompute, exposed comm per dimension, optimizer and bubble (the step's remaining idle
   time on that stage), which add up to the step time; ``StepResult.bottleneck`` names the stage and the resource
   that dominates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.compute import ComputeEfficiency, default_efficiency
from simulator.compute.gemm import peak_flops
from simulator.compute.host import EAGER_PYTORCH_H200_HOST
from simulator.compute.layer import LayerTime, mean_layer_time
from simulator.compute.optimizer import optimizer_time
from simulator.hardware import GpuSpec
from simulator.model import ModelSpec, layer_kinds, model_flops
from simulator.model.spec import moe_flags_of
from simulator.moe import DEFAULT_MOE_SETTINGS, MoeSettings
from simulator.plan import ResolvedPlan, moe_backend
from simulator.pricing.compute import embedding_time, head_time, layer_time
from simulator.pricing.groups import GroupTimer
from simulator.pricing.moe_layer import MoeLayerTiming, moe_layer_timing
from simulator.pricing.overlap import coefficients, exposed, exposed_bucketed
from simulator.program import CROSS_ENTROPY_BYTES, PERMUTE_CHAINS
from simulator.schedule.costs import Cost, dp_window, layer_costs, microbatch_dp_cost
from simulator.schedule.dual_timeline import PhaseCosts, phase_costs, rank_costs, run_dual_timeline
from simulator.schedule.result import CommRow, StepResult, TraceEvent
from simulator.schedule.stragglers import straggler_factor
from simulator.schedule.timeline import PairHiding, StageTimeline, run_timeline
from simulator.topology import Topology
from simulator.traffic import DIMS, StepTraffic, step_traffic
from simulator.traffic.step import stage_traffic


@dataclass(frozen=True)
class _Inputs:
    """What every part of one step's build reads, assembled once: the plan (with its resolved recipe and shapes),
    the GPU and its coefficients, the traffic, the time of each layer kind, each stage's MoE layer, and the
    :class:`GroupTimer` (the one cache, keyed by value)."""

    model: ModelSpec
    plan: ResolvedPlan
    gpu: GpuSpec
    eff: ComputeEfficiency
    dtype: str
    traffic: StepTraffic
    timer: GroupTimer
    layers: dict[bool, LayerTime]
    moe: tuple[MoeLayerTiming | None, ...]
    cache: dict | None = None
    """shared between plans of one model on one GPU with one efficiency table (plan search); None: not shared"""

    def cached(self, key: tuple, compute):
        """``compute()``, or its value stored under ``key`` in the shared cache."""
        if self.cache is None:
            return compute()
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]


def _layer_times(model: ModelSpec, plan: ResolvedPlan, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str,
                 moe: MoeSettings, cache: dict | None = None) -> dict[bool, LayerTime]:
    """One :class:`LayerTime` per FFN kind (MoE or dense) present in the model; where layers of a kind differ in
    their attention window (alternating sliding-window layers) it is their layer-weighted mean, exact for the
    totals of any stage holding whole periods of the pattern. ``cache``: a dict shared by plans of one model on
    one GPU with one efficiency table (plan search), keyed by everything else :func:`layer_time` reads. ``moe``:
    the scenario's MoE settings (the permute chain and grouped or sequential experts)."""
    r, groups = plan.recipe, {}
    host = EAGER_PYTORCH_H200_HOST if plan.training.host_launch == "eager" else None
    permute, sequential = PERMUTE_CHAINS[moe.permute], moe.experts == "sequential"
    # Megatron's all-to-all dispatcher sorts the received rows by local expert and back
    sort_chunks = plan.moe_backend.sorted_by_expert and plan.shape.ep > 1 and plan.shape.local_experts > 1
    for index, count in layer_kinds(model):
        key = ("layer", plan.shape, dtype, index, r.attention, r.eager, r.amp_casts, r.fp8_cast_bytes,
               r.grad_accum_bytes, r.fsdp_copy_bytes, host, permute, sequential, sort_chunks)
        if cache is not None and key in cache:
            lt = cache[key]
        else:
            lt = layer_time(model, plan.shape, gpu, eff, dtype, layer_index=index, attention=r.attention,
                            eager=r.eager, amp=r.amp_casts, fp8_cast_bytes=r.fp8_cast_bytes,
                            grad_accum_bytes=r.grad_accum_bytes, host=host, permute=permute,
                            sequential_experts=sequential, sort_chunks=sort_chunks,
                            fsdp_copy_bytes=r.fsdp_copy_bytes)
            if cache is not None:
                cache[key] = lt
        groups.setdefault(model.is_moe_layer(index), []).append((lt, count))
    return {kind: members[0][0] if len(members) == 1 else mean_layer_time(members)
            for kind, members in groups.items()}


def _inputs(model: ModelSpec, plan: ResolvedPlan, topology: Topology, calibration, eff: ComputeEfficiency | None,
            moe: MoeSettings | None, layer_cache: dict | None = None) -> _Inputs:
    gpu = topology.cluster.node.gpu
    eff = eff or default_efficiency(gpu.architecture)
    dtype = plan.gemm_dtype(gpu)
    timer = GroupTimer(plan, topology, calibration, moe, shared=layer_cache)
    layers = _layer_times(model, plan, gpu, eff, dtype, moe or DEFAULT_MOE_SETTINGS, layer_cache)
    per_stage: list[MoeLayerTiming | None] = [None] * plan.parallel.pp
    if True in layers and plan.parallel.ep > 1:
        by_group: dict[tuple, MoeLayerTiming] = {}
        for s in range(plan.parallel.pp):
            key = timer.key("ep", s)
            if key not in by_group:
                by_group[key] = moe_layer_timing(model, plan, layers[True], timer.moe_comm(s), timer.moe_algorithm(s),
                                                 gpu, eff, dtype)
            per_stage[s] = by_group[key]
    stages = None
    if layer_cache is not None:     # plans that differ only in micro-batch share their stages' DP ops
        cache = layer_cache.setdefault(STAGE_TRAFFIC_CACHE, {})
        key = (plan.parallel, plan.world_size, plan.recipe, plan.stage_layers)
        try:
            stages = cache.get(key)
            if stages is None:
                if len(cache) >= CHUNK_CACHE_SIZE:    # bounded: a search visits micro-batches innermost
                    cache.clear()
                stages = cache[key] = stage_traffic(plan)
        except TypeError:           # an unhashable parallel: value (a list): not shared
            stages = None
    return _Inputs(model, plan, gpu, eff, dtype, step_traffic(plan, stages), timer, layers, tuple(per_stage),
                   layer_cache)


def _chunk_costs(ctx: _Inputs, stage: int) -> list[tuple[Cost, Cost]]:
    """(forward, backward) Cost of each model chunk of ``stage`` for one micro-batch."""
    return _with_dp(ctx, stage, _chunk_bases(ctx, stage))


def _with_dp(ctx: _Inputs, stage: int, bases: list[tuple[Cost, Cost, float]]) -> list[tuple[Cost, Cost]]:
    """The chunk costs of ``stage`` from :func:`_chunk_bases`: each chunk's ZeRO-2/3 per-micro-batch gathers and
    reductions added last (on copies: the bases may be shared)."""
    ops = ctx.traffic.stages[stage]
    if not _has_microbatch_ops(ctx, stage):
        return [(f, b) for f, b, _ in bases]
    out = []
    for f, b, share in bases:
        fwd, bwd = f.copy(), b.copy()
        microbatch_dp_cost(ops, ctx.timer, stage, share, fwd, bwd)
        out.append((fwd, bwd))
    return out


def _has_microbatch_ops(ctx: _Inputs, stage: int) -> bool:
    """Whether ``stage`` runs per-micro-batch DP ops (ZeRO-2/3), which :func:`_with_dp` adds on copies."""
    return any(o.scope == "microbatch" for o in ctx.traffic.stages[stage])


def _chunk_bases(ctx: _Inputs, stage: int, layer_costs_of: dict | None = None
                 ) -> list[tuple[Cost, Cost, float]]:
    """(forward, backward, share of the stage's layers) of each model chunk of ``stage`` for one micro-batch, all
    but the per-micro-batch data-parallel ops (which alone depend on how model states are sharded).
    ``layer_costs_of``: a dict the caller keeps across the stages of one plan, where a layer's costs are kept by
    what they read that depends on the stage (the group of each layer op and the stage's MoE layer)."""
    p, plan = ctx.plan.parallel, ctx.plan
    layers, counts = plan.stage_layers[stage], plan.stage_chunks[stage]
    per_kind: dict[tuple[bool, str], tuple[Cost, Cost]] = {}
    if layer_costs_of is not None:
        groups = tuple(ctx.timer.key_id(op.group, stage) for op in ctx.traffic.layer)
        per_kind = layer_costs_of.setdefault((groups, id(ctx.moe[stage])), per_kind)
    modes = plan.layer_recompute(stage)
    # the last stage holds a copy of the word embedding when pipelined with tied embeddings, or with MTP modules
    # (they embed the next tokens there; simulator.plan.params.stage_params)
    mtp = ctx.model.mtp_layers > 0 and plan.training.mode == "train"
    last = plan.last_stage_rank          # pp - 1; DualPipeV / ZB-V: rank 0, where the V ends
    accum, copy = plan.recipe.grad_accum_bytes, (ctx.model.tied_embeddings or mtp) and last > 0
    out, start = [], 0
    for c, n in enumerate(counts):
        fwd, bwd = Cost(), Cost()
        kinds: dict[tuple[bool, str], int] = {}
        for key in zip(moe_flags_of(ctx.model, layers[start:start + n]), modes[start:start + n], strict=True):
            kinds[key] = kinds.get(key, 0) + 1
        for (kind, mode), count in kinds.items():   # layers of one kind and mode cost the same: add them at once
            if (kind, mode) not in per_kind:
                per_kind[kind, mode] = layer_costs(ctx.layers[kind], ctx.traffic.layer, "moe" if kind else "dense",
                                                   mode, p.cp, ctx.timer, stage, ctx.moe[stage] if kind else None,
                                                   p.recomputed_modules)
            fwd.add(per_kind[kind, mode][0], count)
            bwd.add(per_kind[kind, mode][1], count)
        start += n
        if stage == 0 and c == 0:
            e = ctx.cached(("embedding", plan.shape, accum, plan.recipe.fsdp_copy_bytes),
                           lambda: embedding_time(ctx.model, plan.shape, ctx.gpu, ctx.eff, accum,
                                                  plan.recipe.fsdp_copy_bytes))
            fwd.compute += e.fwd_s
            bwd.compute += e.bwd_s
        if stage == last and c == len(counts) - 1:
            h = ctx.cached(("head", plan.shape, ctx.dtype, accum, copy, plan.recipe.cross_entropy,
                            plan.recipe.fsdp_copy_bytes),
                           lambda: head_time(ctx.model, plan.shape, ctx.gpu, ctx.eff, ctx.dtype, accum, copy,
                                             CROSS_ENTROPY_BYTES[plan.recipe.cross_entropy],
                                             plan.recipe.fsdp_copy_bytes))
            fwd.add(Cost(compute=h.fwd_s, flops=h.fwd_flops))
            bwd.add(Cost(compute=h.bwd_s, flops=h.bwd_flops, wgrad=h.wgrad_s))
        _boundary_cost(ctx, stage, c, fwd, bwd)
        out.append((fwd, bwd, n / max(len(layers), 1)))
    return out


def _boundary_cost(ctx: _Inputs, stage: int, chunk: int, fwd: Cost, bwd: Cost) -> None:
    """Blocking pipeline transfers of one chunk: a forward sends its output unless it is the last virtual stage
    and gathers its input unless it is the first; a backward the other way round."""
    p = ctx.plan.parallel
    u, last = chunk * p.pp + stage, p.pp * p.vpp - 1
    for op in ctx.traffic.pipeline:
        sends, gradient = op.op == "sendrecv", "gradient" in op.name
        cost = bwd if gradient else fwd
        applies = (u > 0 if gradient else u < last) if sends else (u < last if gradient else u > 0)
        if applies:
            timing = ctx.timer.time(op, min(stage, p.pp - 2))
            cost.expose("pp", timing.call_s, timing.on_network)
            cost.comm["pp"] += timing.call_s


def _p2p_s(ctx: _Inputs) -> float:
    """One boundary sendrecv (the slowest boundary of the pipeline)."""
    if not ctx.traffic.pipeline:
        return 0.0
    op = ctx.traffic.pipeline[0]
    return ctx.cached(("p2p", ctx.timer._layout_id, op),     # one value per rank layout and op (plan search)
                      lambda: max(ctx.timer.time(op, s).call_s for s in range(ctx.plan.parallel.pp - 1)))


def _tail(ctx: _Inputs, stage: int, chunks: list[tuple[Cost, Cost]], start_s: float, slowest: float,
          trace: bool = True) -> tuple[dict[str, float], float, list[TraceEvent]]:
    """Exposed per-step comm (by dim) and optimizer seconds after the stage's last backward, with trace bars
    (none when ``trace`` is False: plan search)."""
    plan = ctx.plan
    ops = [o for o in ctx.traffic.stages[stage] if o.scope == "step"]
    params = ctx.traffic.params[stage]
    bwd = [b for _, b in chunks]
    fwd = [f for f, _ in chunks]
    bucket = coefficients()["grad_bucket_elements"] / max(params.dense + params.expert, 1.0)
    out = dict.fromkeys(DIMS, 0.0)
    events, t = [], start_s
    gathers = []
    for op in ops:
        timing = ctx.timer.time(op, stage)
        call = timing.call_s
        if op.op == "all_gather":
            gathers.append((op, call, timing))
            continue
        window = sum(dp_window(b, timing.on_network) for b in bwd)
        ex = exposed_bucketed(call, window, bucket, timing.interference) if op.overlap == "backward" else call
        out[op.dim] += ex
        if trace:
            events.append(TraceEvent(stage, f"{op.dim} comm", op.name, t, ex))
        t += ex
    r = plan.recipe
    owned = (params.dense / plan.dense_shard_degree + params.expert / plan.expert_shard_degree if r.stage >= 1
             else params.dense + params.expert)
    opt = optimizer_time(owned, params.dense + params.expert, r.optimizer_update_bytes, r.grad, ctx.gpu,
                         ctx.eff) * slowest
    if trace:
        events.append(TraceEvent(stage, "compute", "optimizer step", t, opt))
    t += opt
    for op, call, timing in gathers:
        window = sum(dp_window(f, timing.on_network, backward=False) for f in fwd)
        ex = exposed(call - call * min(1.0, bucket), window, timing.interference) + call * min(1.0, bucket) \
            if op.overlap == "forward" else call
        out[op.dim] += ex
        if trace:
            events.append(TraceEvent(stage, f"{op.dim} comm", op.name, t, ex))
        t += ex
    return out, opt, events


def _comm_rows(ctx: _Inputs, stage: int) -> tuple[CommRow, ...]:
    """The comm table of one stage: calls per step of every op."""
    plan, p, m = ctx.plan, ctx.plan.parallel, ctx.plan.num_microbatches
    kinds = [ctx.model.is_moe_layer(i) for i in plan.stage_layers[stage]]
    rows = []
    recomputed = [mode != "none" for mode in plan.layer_recompute(stage)]
    for op in ctx.traffic.layer:
        n_layers = sum(1 for k, r in zip(kinds, recomputed, strict=True)
                       if (op.layer == "any" or (op.layer == "moe") == k) and (r or op.scope != "layer_recompute"))
        rows.append((op, op.count * n_layers * m))
    rows += [(op, plan.schedule.boundary_calls(stage, p.pp, p.vpp, m, "gradient" in op.name))
             for op in ctx.traffic.pipeline]
    rows += [(op, m if op.scope == "microbatch" else 1) for op in ctx.traffic.stages[stage]]
    out = []
    for op, count in rows:
        if count == 0:
            continue
        label = f"{op.name} (recompute)" if op.scope == "layer_recompute" else op.name
        timing = ctx.timer.time(op, min(stage, p.pp - 2) if op.scope == "boundary" else stage)
        out.append(CommRow(op.dim, op.op, label, op.bytes if timing.bytes is None else timing.bytes, int(count),
                           timing.algorithm, timing.link, timing.call_s))
    return tuple(out)


@dataclass(frozen=True)
class StepParts:
    """Everything of a step but the pipeline timeline: the inputs, the MoE settings, the slowest GPU's pace and
    every stage's (forward, backward) chunk costs. :func:`finish_step` turns them and the stage timelines into the
    result."""

    ctx: _Inputs
    moe: MoeSettings | None
    slowest: float
    chunks: list[list[tuple[Cost, Cost]]]
    signatures: tuple[int | None, ...] = ()
    """:func:`_middle_signatures` (computed once, read again by :func:`finish_step`)"""

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


def prepare_step(model: ModelSpec, plan: ResolvedPlan, topology: Topology, *, calibration=None,
                 efficiency: ComputeEfficiency | None = None, moe: MoeSettings | None = None,
                 gpu_speed_sigma: float | None = None, layer_cache: dict | None = None) -> StepParts:
    """Steps 1-3 of the module docstring (arguments as :func:`simulate_step`; ``layer_cache``: a dict the caller
    shares between plans of one model on one topology with one efficiency table, see :func:`_layer_times`)."""
    plan = plan if moe is None else plan.with_moe_backend(moe_backend(moe.backend))  # the settings name the backend
    ctx = _inputs(model, plan, topology, calibration, efficiency, moe, layer_cache)
    sigma = coefficients()["gpu_speed_sigma"] if gpu_speed_sigma is None else gpu_speed_sigma
    slowest = straggler_factor(plan.world_size, sigma, ctx.eff.calibration_gpus)
    signatures = _middle_signatures(ctx)
    if layer_cache is None:
        return StepParts(ctx, moe, slowest, _all_chunk_costs(ctx, signatures, slowest), signatures)
    cache, bases_cache = layer_cache.setdefault(CHUNK_CACHE, {}), layer_cache.setdefault(BASE_CACHE, {})
    base_key = _bases_key(ctx)
    per_tuple: dict[int, tuple] = {}     # each stage's per-micro-batch DP ops, once per distinct op tuple
    for ops in ctx.traffic.stages:
        if id(ops) not in per_tuple:
            per_tuple[id(ops)] = tuple(o for o in ops if o.scope == "microbatch")
    key = (base_key, tuple(per_tuple[id(ops)] for ops in ctx.traffic.stages), slowest)
    chunks = cache.get(key)
    if chunks is None:
        bases = bases_cache.get(base_key)
        if bases is None:
            if len(bases_cache) >= CHUNK_CACHE_SIZE:
                bases_cache.clear()
            bases = bases_cache[base_key] = _all_chunk_bases(ctx, signatures)
        if len(cache) >= CHUNK_CACHE_SIZE:
            cache.clear()
        chunks = cache[key] = _all_chunk_costs(ctx, signatures, slowest, bases)
    return StepParts(ctx, moe, slowest, chunks, signatures)


#: the ``layer_cache`` entries holding chunk costs (by :func:`_bases_key`, each stage's per-micro-batch DP ops
#: and the straggler factor), chunk bases (by :func:`_bases_key`) and each stage's DP ops and parameters
#: (:func:`simulator.traffic.step.stage_traffic`, by the plan values it reads), and their bound (a plan search
#: visits sharding and micro-batch innermost, so the plans that share them come close together)
CHUNK_CACHE = "chunk costs"
BASE_CACHE = "chunk bases"
STAGE_TRAFFIC_CACHE = "stage traffic"
CHUNK_CACHE_SIZE = 4096


def _all_chunk_bases(ctx: _Inputs, signatures: tuple[int | None, ...]) -> list[list[tuple[Cost, Cost, float]]]:
    """:func:`_chunk_bases` of every stage; middle stages of one signature share one."""
    bases, seen, layer_costs_of = [], {}, {}
    for s, signature in enumerate(signatures):
        if signature is None or signature not in seen:
            stage = _chunk_bases(ctx, s, layer_costs_of)
            if signature is not None:
                seen[signature] = stage
        bases.append(stage if signature is None else seen[signature])
    return bases


def _all_chunk_costs(ctx: _Inputs, signatures: tuple[int | None, ...], slowest: float,
                     bases: list[list[tuple[Cost, Cost, float]]] | None = None) -> list[list[tuple[Cost, Cost]]]:
    """:func:`_chunk_costs` of every stage at the slowest GPU's pace (from ``bases``, :func:`_all_chunk_bases`,
    when given); middle stages of one signature share one."""
    chunks, seen = [], {}
    for s, signature in enumerate(signatures):
        if signature is None or signature not in seen:
            raw = _chunk_costs(ctx, s) if bases is None else _with_dp(ctx, s, bases[s])
            if _has_microbatch_ops(ctx, s):    # _with_dp made copies of its own: scale them in place
                costs = [(f.scale_compute(slowest), b.scale_compute(slowest)) for f, b in raw]
            else:
                costs = [(f.scaled_compute(slowest), b.scaled_compute(slowest)) for f, b in raw]
            if signature is not None:
                seen[signature] = costs
        chunks.append(costs if signature is None else seen[signature])
    return chunks


def _bases_key(ctx: _Inputs) -> tuple:
    """Everything :func:`_chunk_bases` reads besides what is fixed for one ``layer_cache`` (model, topology, GPU,
    efficiency table, calibration, MoE settings): the rank layout (which with the topology fixes every group and
    so every op time and MoE layer), the rank shape, the recipe's compute fields and the layer times themselves
    (so that whatever else a layer time comes to read keys it too), the layers and recompute modes of every chunk,
    the layer and pipeline ops, and the rank that runs the head (DualPipeV: rank 0). Plans that differ only in how they
    shard model states have one key."""
    plan, r = ctx.plan, ctx.plan.recipe
    p = plan.parallel
    return (ctx.timer._layout_id, plan.shape, ctx.dtype, r.attention, r.eager, r.amp_casts, r.fp8_cast_bytes,
            r.grad_accum_bytes, r.fsdp_copy_bytes, r.moe_dispatch_dtype, r.cross_entropy, tuple(ctx.layers.items()), p.pp, p.vpp, p.cp, p.recompute,
            p.recompute_layers, p.recomputed_modules, plan.stage_layers, plan.stage_chunks, ctx.traffic.layer,
            ctx.traffic.pipeline, plan.last_stage_rank)


def _middle_signatures(ctx: _Inputs) -> tuple[int | None, ...]:
    """What the chunk costs of each middle stage (neither first nor last) depend on, as a small integer per stage
    (equal integers, equal signatures; None for the first and last stage). A signature is the stage's layers per
    chunk (which also fix each layer's recompute mode) and their FFN kinds, its per-stage comm ops, the
    node-relative shape of the group each of its ops runs on and its MoE layer. Middle stages with one signature
    have the same chunk costs (computed once) and tails."""
    pp = ctx.plan.parallel.pp
    # a middle stage is below pp - 1, so a boundary op's stage min(stage, pp - 2) is the stage itself: every op's
    # group key is key(op.group, stage), and the keys of the distinct groups (in one order) say the same
    common = [op.group for ops in (ctx.traffic.layer, ctx.traffic.pipeline) for op in ops]
    timer = ctx.timer

    def key_table(groups: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:   # per middle stage, per layout
        return ctx.cached(("middle key ids", timer._layout_id, groups),
                          lambda: tuple(tuple(timer.key_id(g, s) for g in groups) for s in range(1, pp - 1)))

    stages, chunks, moe = ctx.traffic.stages, ctx.plan.stage_chunks, ctx.model.moe is not None
    inner = range(1, pp - 1)
    ops = list(map(id, stages[1:pp - 1]))
    tables = {i: key_table(tuple(dict.fromkeys(common + [op.group for op in o])))    # key tables by the identity
              for i, o in dict(zip(ops, stages[1:pp - 1], strict=True)).items()}     # of a stage's op tuple
    rows = tables[ops[0]] if len(tables) == 1 else [tables[ops[s - 1]][s - 1] for s in inner]
    if (not moe and len(tables) == 1 and chunks[1:pp - 1].count(chunks[1]) == pp - 2
            and rows.count(rows[0]) == pp - 2):
        return (None, *(0,) * (pp - 2), None)     # a dense model's even split: one key below (MoE layers: None)
    ids: dict[tuple, int] = {}
    flags = [tuple(moe_flags_of(ctx.model, ctx.plan.stage_layers[s])) if moe else None for s in inner]
    middle = [ids.setdefault(key, len(ids))
              for key in zip(chunks[1:pp - 1], flags, ops, rows, map(id, ctx.moe[1:pp - 1]), strict=True)]
    return (None, *middle, None) if pp > 1 else (None,)


def simulate_step(model: ModelSpec, plan: ResolvedPlan, topology: Topology, *, calibration=None,
                  efficiency: ComputeEfficiency | None = None, moe: MoeSettings | None = None,
                  gpu_speed_sigma: float | None = None) -> StepResult:
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
    """
    parts = prepare_step(model, plan, topology, calibration=calibration, efficiency=efficiency, moe=moe,
                         gpu_speed_sigma=gpu_speed_sigma)
    return finish_step(parts, replay_timelines(parts))


def replay_timelines(parts: StepParts) -> list[StageTimeline]:
    """The event timeline of the plan's schedule (:func:`simulator.schedule.timeline.run_timeline`): the
    reference, and the only one that runs MoE micro-batch overlap pairs and the schedules that split the backward
    (bidirectional and zero-bubble: :func:`simulator.schedule.dual_timeline.run_dual_timeline`)."""
    p, schedule = parts.ctx.plan.parallel, parts.ctx.plan.schedule
    if schedule.replay == "split":
        costs = [PhaseCosts.of(ph) for ph in phase_costs(schedule, parts.chunks)]
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
    p2p = _p2p_s(ctx)
    tails, seen = [], {}
    for s in range(p.pp):
        signature = None if comm_table else parts.signatures[s]
        if signature is None:
            tails.append(_tail(ctx, s, chunks[s], timelines[s].end_s, slowest, comm_table))
            continue
        if signature not in seen:      # the tail's times do not depend on its start; no events
            seen[signature] = _tail(ctx, s, chunks[s], 0.0, slowest, False)
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
    bubble = step - total.compute - total.recompute - total.host - sum(exposed_comm.values()) - tails[k][1]
    per_list: dict[int, float] = {}     # middle stages of one signature share their chunk list: sum it once
    for c in chunks:
        if id(c) not in per_list:
            per_list[id(c)] = sum(f.flops + b.flops for f, b in c)
    flops = sum(per_list[id(c)] for c in chunks) * m / p.pp
    t = plan.training
    return StepResult(
        step_s=step, compute_s=total.compute, recompute_s=total.recompute, bubble_s=max(bubble, 0.0),
        host_s=total.host,
        optimizer_s=tails[k][1], exposed_comm_s=exposed_comm, tokens_per_s=t.global_batch * t.seq_len / step,
        model_flops_per_gpu=model_flops(model, t.seq_len, t.global_batch, causal=t.attention == "flash",
                                        attention=t.attention) / plan.world_size,
        hardware_flops_per_gpu=flops, peak_flops=peak_flops(ctx.gpu, ctx.dtype),
        comm=_comm_rows(ctx, k) if comm_table else (),
        critical_stage=k, stage_end_s=tuple(ends), stage_busy_s=tuple(busy), timelines=tuple(timelines),
        chunk_comm_s=tuple(tuple((dict(f.comm), dict(b.comm)) for f, b in c) for c in chunks) if comm_table else (),
        tail_events=tuple(e for tl in tails for e in tl[2]), p2p_s=p2p,
        moe=ctx.moe[k].summary() if ctx.moe[k] is not None else None)


def layer_step_times(model: ModelSpec, plan: ResolvedPlan, topology: Topology, *, layer_index: int = 0,
                     stage: int = 0, calibration=None, efficiency: ComputeEfficiency | None = None,
                     moe: MoeSettings | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of one layer for one micro-batch, comm and recompute included, as Korthikanti
    et al. 2023 Table 4 reports them."""
    ctx = _inputs(model, plan, topology, calibration, efficiency, moe)
    kind = model.is_moe_layer(layer_index)
    fwd, bwd = layer_costs(ctx.layers[kind], ctx.traffic.layer, "moe" if kind else "dense", plan.parallel.recompute,
                           plan.parallel.cp, ctx.timer, stage, ctx.moe[stage] if kind else None,
                           plan.parallel.recomputed_modules)
    return fwd.total, bwd.total
