"""Chunk costs: the (forward, backward) :class:`~simulator.schedule.costs.Cost` of each model chunk of each stage
for one micro-batch, at the slowest GPU's pace (step 3 of :mod:`simulator.schedule.step`).

Two pure functions, cached by their frozen arguments (:class:`simulator.schedule.cache.StepCache`):
:func:`chunk_bases` (:class:`ChunkInputs`: everything but the ZeRO-2/3 per-micro-batch ops, so plans that differ
only in how they shard model states share it) and :func:`chunk_costs` (:class:`CostInputs`: the bases, each
stage's per-micro-batch DP ops and the straggler factor).
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.model.shape import RankShape
from simulator.model.spec import moe_flags_of
from simulator.plan.resolved import layer_recompute
from simulator.pricing.compute import embedding_time, head_time
from simulator.pricing.groups import GroupTimer
from simulator.program import CROSS_ENTROPY_BYTES
from simulator.schedule.cache import Fixed, StepCache
from simulator.schedule.costs import Cost, layer_costs, microbatch_dp_cost, settle_issue
from simulator.schedule.inputs import LayerInputs, MoeInputs, StepInputs, layer_times, moe_timings
from simulator.traffic import CommOp
from simulator.traffic.step import RECEIVE

Bases = list[tuple[Cost, Cost, float]]
"""(forward, backward, share of the stage's layers) of each chunk of one stage"""


class ChunkInputs(NamedTuple):
    """What :func:`chunk_bases` reads: the plan's comm timer (its rank layout and MoE inputs), the layer inputs,
    the MoE layer inputs (None without MoE layers on EP > 1), the pipeline and CP degrees, the layers and chunk sizes
    of every stage, the recompute mode and its layer count (which give each layer's mode), the modules selective recompute re-runs, the rank that runs
    the head, whether the run trains (MTP modules embed on the last stage), the loss chain, the layer and
    pipeline ops and the middle stages' signatures (:func:`middle_signatures`: which stages share their costs)."""

    timer: GroupTimer
    layer: LayerInputs
    moe: MoeInputs | None
    pp: int
    vpp: int
    cp: int
    stage_layers: tuple[tuple[int, ...], ...]
    stage_chunks: tuple[tuple[int, ...], ...]
    recompute: str
    recompute_layers: int | None
    recomputed_modules: frozenset[str] | None
    last_stage_rank: int
    train: bool
    cross_entropy: str
    layer_ops: tuple[CommOp, ...]
    pipeline_ops: tuple[CommOp, ...]
    signatures: tuple[int | None, ...]


class CostInputs(NamedTuple):
    """What :func:`chunk_costs` reads: the chunk bases' inputs, each stage's per-micro-batch DP ops (ZeRO-2/3)
    and the slowest GPU's pace."""

    bases: ChunkInputs
    dp_ops: tuple[tuple[CommOp, ...], ...]
    slowest: float


class EmbeddingInputs(NamedTuple):
    """What :func:`simulator.compute.layer.embedding_time` reads besides the model, GPU and efficiency table."""

    shape: RankShape
    grad_accum_bytes: float
    fsdp_copy_bytes: tuple[float, float]


class HeadInputs(NamedTuple):
    """What :func:`simulator.compute.layer.head_time` reads besides the model, GPU and efficiency table."""

    shape: RankShape
    dtype: str
    grad_accum_bytes: float
    copy: bool
    cross_entropy: str
    fsdp_copy_bytes: tuple[float, float]


def _embedding(cache: StepCache, fixed: Fixed, e: EmbeddingInputs):
    return embedding_time(fixed.model, e.shape, fixed.gpu, fixed.eff, e.grad_accum_bytes, e.fsdp_copy_bytes)


def _head(cache: StepCache, fixed: Fixed, h: HeadInputs):
    return head_time(fixed.model, h.shape, fixed.gpu, fixed.eff, h.dtype, h.grad_accum_bytes, h.copy,
                     CROSS_ENTROPY_BYTES[h.cross_entropy], h.fsdp_copy_bytes)


def embedding_of(cache: StepCache, fixed: Fixed, li: LayerInputs):
    """The first chunk's embedding time (:func:`simulator.compute.layer.embedding_time`) of a plan with layer
    inputs ``li``, through the cache."""
    return cache.get(_embedding, fixed, EmbeddingInputs(li.shape, li.grad_accum_bytes, li.fsdp_copy_bytes))


def holds_embedding_copy(model, train: bool, last: int) -> bool:
    """Whether the last stage (rank ``last``: pp - 1; DualPipeV / ZB-V: rank 0, where the V ends) holds a copy of the
    word embedding: pipelined with tied embeddings, or with MTP modules in training (they embed the next tokens
    there; simulator.plan.params.stage_params)."""
    return bool(model.tied_embeddings or (model.mtp_layers > 0 and train)) and last > 0


def head_of(cache: StepCache, fixed: Fixed, li: LayerInputs, copy: bool, cross_entropy: str):
    """The last chunk's head time (:func:`simulator.compute.layer.head_time`) of a plan with layer inputs ``li``;
    ``copy``: the last stage holds a copy of the word embedding; ``cross_entropy``: the loss chain."""
    return cache.get(_head, fixed, HeadInputs(li.shape, li.dtype, li.grad_accum_bytes, copy, cross_entropy,
                                              li.fsdp_copy_bytes))


def chunk_inputs(ctx: StepInputs, signatures: tuple[int | None, ...]) -> ChunkInputs:
    """The :class:`ChunkInputs` of the plan of ``ctx``."""
    plan, p = ctx.plan, ctx.plan.parallel
    moe = (MoeInputs(ctx.timer, ctx.layer, p.etp, p.pp) if True in ctx.layers and p.ep > 1 else None)
    return ChunkInputs(ctx.timer, ctx.layer, moe, p.pp, p.vpp, p.cp, plan.stage_layers, plan.stage_chunks,
                       p.recompute, p.recompute_layers, p.recomputed_modules,
                       plan.last_stage_rank, plan.training.mode == "train", plan.recipe.cross_entropy,
                       ctx.traffic.layer, ctx.traffic.pipeline, signatures)


def chunk_bases(cache: StepCache, fixed: Fixed, c: ChunkInputs) -> list[Bases]:
    """:func:`_stage_bases` of every stage; middle stages of one signature share one."""
    layers = dict(cache.get(layer_times, fixed, c.layer))
    moe = cache.get(moe_timings, fixed, c.moe) if c.moe is not None else (None,) * c.pp
    bases, seen, layer_costs_of = [], {}, {}
    for s, signature in enumerate(c.signatures):
        if signature is None or signature not in seen:
            stage = _stage_bases(cache, fixed, c, layers, moe, s, layer_costs_of)
            if signature is not None:
                seen[signature] = stage
        bases.append(stage if signature is None else seen[signature])
    return bases


def _stage_bases(cache: StepCache, fixed: Fixed, c: ChunkInputs, layers: dict, moe: tuple, stage: int,
                 layer_costs_of: dict) -> Bases:
    """(forward, backward, share of the stage's layers) of each model chunk of ``stage`` for one micro-batch, all
    but the per-micro-batch data-parallel ops (which alone depend on how model states are sharded).
    ``layer_costs_of``: kept across the stages of one plan, where a layer's costs are kept by what they read that
    depends on the stage (the group of each layer op and the stage's MoE layer)."""
    model, li = fixed.model, c.layer
    layers_of, counts = c.stage_layers[stage], c.stage_chunks[stage]
    groups = tuple(c.timer.key_id(op.group, stage) for op in c.layer_ops)
    per_kind: dict[tuple[bool, str], tuple[Cost, Cost]] = layer_costs_of.setdefault((groups, id(moe[stage])), {})
    modes = layer_recompute(c.recompute, c.recompute_layers, counts)
    last = c.last_stage_rank
    copy = holds_embedding_copy(model, c.train, last)
    out, start = [], 0
    for chunk, n in enumerate(counts):
        fwd, bwd = Cost(), Cost()
        kinds: dict[tuple[bool, str], int] = {}
        for key in zip(moe_flags_of(model, layers_of[start:start + n]), modes[start:start + n], strict=True):
            kinds[key] = kinds.get(key, 0) + 1
        for (kind, mode), count in kinds.items():   # layers of one kind and mode cost the same: add them at once
            if (kind, mode) not in per_kind:
                per_kind[kind, mode] = layer_costs(layers[kind], c.layer_ops, "moe" if kind else "dense", mode,
                                                   c.cp, c.timer, stage, moe[stage] if kind else None,
                                                   c.recomputed_modules)
            fwd.add(per_kind[kind, mode][0], count)
            bwd.add(per_kind[kind, mode][1], count)
        start += n
        if stage == 0 and chunk == 0:
            e = embedding_of(cache, fixed, li)
            fwd.compute += e.fwd_s
            bwd.compute += e.bwd_s
        if stage == last and chunk == len(counts) - 1:
            h = head_of(cache, fixed, li, copy, c.cross_entropy)
            fwd.add(Cost(compute=h.fwd_s, flops=h.fwd_flops))
            bwd.add(Cost(compute=h.bwd_s, flops=h.bwd_flops, wgrad=h.wgrad_s))
            if li.host is not None and li.host.step_s > 0:   # embedding, head and loss kernels of the micro-batch
                bwd.issue += li.host.step_s
        boundary_cost(c.timer, c.pipeline_ops, c.pp, c.vpp, stage, chunk, fwd, bwd)
        settle_issue(fwd)
        settle_issue(bwd)
        out.append((fwd, bwd, n / max(len(layers_of), 1)))
    return out


def boundary_cost(timer: GroupTimer, ops: tuple[CommOp, ...], pp: int, vpp: int, stage: int, chunk: int, fwd: Cost,
                  bwd: Cost) -> None:
    """Blocking pipeline transfers of one chunk: a forward sends its output unless it is the last virtual stage
    and gathers its input unless it is the first; a backward the other way round. A receive of its own
    (``RECEIVE``: the profile's ``pipeline_p2p`` is ``separate``) is charged where a gather is: to the receiver."""
    u, last = chunk * pp + stage, pp * vpp - 1
    for op in ops:
        sends, gradient = op.op == "sendrecv" and not op.name.endswith(RECEIVE), "gradient" in op.name
        cost = bwd if gradient else fwd
        applies = (u > 0 if gradient else u < last) if sends else (u < last if gradient else u > 0)
        if applies:
            timing = timer.time(op, min(stage, pp - 2))
            cost.expose("pp", timing.call_s, timing.on_network)
            cost.comm["pp"] += timing.call_s


def with_dp(timer: GroupTimer, ops: tuple[CommOp, ...], stage: int, bases: Bases) -> list[tuple[Cost, Cost]]:
    """The chunk costs of ``stage`` from its bases: each chunk's ZeRO-2/3 per-micro-batch gathers and reductions
    (``ops``) added last (on copies: the bases may be shared)."""
    if not ops:
        return [(f, b) for f, b, _ in bases]
    out = []
    for f, b, share in bases:
        fwd, bwd = f.copy(), b.copy()
        microbatch_dp_cost(ops, timer, stage, share, fwd, bwd)
        out.append((fwd, bwd))
    return out


def chunk_costs(cache: StepCache, fixed: Fixed, k: CostInputs) -> list[list[tuple[Cost, Cost]]]:
    """The chunk costs of every stage at the slowest GPU's pace, from :func:`chunk_bases`; middle stages of one
    signature share one."""
    bases = cache.get(chunk_bases, fixed, k.bases)
    chunks, seen = [], {}
    for s, signature in enumerate(k.bases.signatures):
        if signature is None or signature not in seen:
            raw = with_dp(k.bases.timer, k.dp_ops[s], s, bases[s])
            if k.dp_ops[s]:    # with_dp made copies of its own: scale them in place
                costs = [(f.scale_compute(k.slowest), b.scale_compute(k.slowest)) for f, b in raw]
            else:
                costs = [(f.scaled_compute(k.slowest), b.scaled_compute(k.slowest)) for f, b in raw]
            if signature is not None:
                seen[signature] = costs
        chunks.append(costs if signature is None else seen[signature])
    return chunks


def middle_signatures(ctx: StepInputs) -> tuple[int | None, ...]:
    """What the chunk costs of each middle stage (neither first nor last) depend on, as a small integer per stage
    (equal integers, equal signatures; None for the first and last stage). A signature is the stage's layers per
    chunk (which also fix each layer's recompute mode) and their FFN kinds, its per-stage comm ops, the
    node-relative shape of the group each of its ops runs on and its MoE layer. Middle stages with one signature
    have the same chunk costs (computed once) and tails."""
    pp = ctx.plan.parallel.pp
    # a middle stage is below pp - 1, so a boundary op's stage min(stage, pp - 2) is the stage itself: every op's
    # group key is key(op.group, stage), and the keys of the distinct groups (in one order) say the same
    common = [op.group for ops in (ctx.traffic.layer, ctx.traffic.pipeline) for op in ops]
    stages, chunks, moe = ctx.traffic.stages, ctx.plan.stage_chunks, ctx.model.moe is not None
    inner = range(1, pp - 1)
    ops = list(map(id, stages[1:pp - 1]))
    tables = {i: ctx.timer.key_table(tuple(dict.fromkeys(common + [op.group for op in o])))   # by the identity
              for i, o in dict(zip(ops, stages[1:pp - 1], strict=True)).items()}           # of a stage's op tuple
    rows = tables[ops[0]] if len(tables) == 1 else [tables[ops[s - 1]][s - 1] for s in inner]
    if (not moe and len(tables) == 1 and chunks[1:pp - 1].count(chunks[1]) == pp - 2
            and rows.count(rows[0]) == pp - 2):
        return (None, *(0,) * (pp - 2), None)     # a dense model's even split: one key below (MoE layers: None)
    ids: dict[tuple, int] = {}
    flags = [tuple(moe_flags_of(ctx.model, ctx.plan.stage_layers[s])) if moe else None for s in inner]
    middle = [ids.setdefault(key, len(ids))
              for key in zip(chunks[1:pp - 1], flags, ops, rows, map(id, ctx.moe[1:pp - 1]), strict=True)]
    return (None, *middle, None) if pp > 1 else (None,)


def all_chunk_costs(ctx: StepInputs, signatures: tuple[int | None, ...], slowest: float
                    ) -> list[list[tuple[Cost, Cost]]]:
    """:func:`chunk_costs` of the plan of ``ctx`` (through its cache)."""
    per_tuple: dict[int, tuple[CommOp, ...]] = {}   # each stage's per-micro-batch DP ops, once per op tuple
    for ops in ctx.traffic.stages:
        if id(ops) not in per_tuple:
            per_tuple[id(ops)] = tuple(o for o in ops if o.scope == "microbatch")
    dp_ops = tuple(per_tuple[id(ops)] for ops in ctx.traffic.stages)
    return ctx.cache.get(chunk_costs, ctx.fixed, CostInputs(chunk_inputs(ctx, signatures), dp_ops, slowest))
