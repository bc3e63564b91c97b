"""The compute variants of a group of candidates (:mod:`.group_bound`, its module docstring, point 1): per stage
and model chunk of a representative plan, the least seconds of a forward and a backward per micro-batch at the
slowest GPU's pace (compute plus the least exposed communication of the members with one TP overlap value,
:mod:`.exposed_bound`), and the re-run seconds of each recompute value; what :func:`~simulator.search.group_bound.
compute_lower` bounds the step with. Split out of :mod:`.group_bound` (session 17: one job each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from simulator.compute import default_efficiency
from simulator.memory.offload import offloaded_activation_bytes
from simulator.model.spec import moe_flags_of
from simulator.moe import DEFAULT_MOE_SETTINGS
from simulator.pricing.groups import GroupTimer
from simulator.schedule.chunks import embedding_of, head_of, holds_embedding_copy
from simulator.schedule.inputs import MoeInputs, layer_inputs, layer_times
from simulator.schedule.step import prepare_step, slowest_pace
from simulator.search.exposed_bound import chunk_exposure


@dataclass(frozen=True)
class Variant:
    """A compute variant of a group (:mod:`.group_bound`'s module docstring, point 1): its representative plan and, per stage and model chunk,
    the compute seconds of a forward (``f``) and a backward (``b``) per micro-batch at the slowest GPU's pace, its
    dense layers' count (``dense``) and their :class:`~simulator.compute.layer.LayerTime` (``layer``, None: no
    dense layer)."""

    plan: Any
    f: np.ndarray
    b: np.ndarray
    dense: np.ndarray
    layer: Any
    slowest: float
    paired: bool = False
    """whether MoE layers pair two micro-batches (no bound: the pairing hides seconds across ops)"""
    overlap: bool = False
    """the TP overlap value whose members' least exposed communication ``f`` and ``b`` hold"""


def recompute_seconds(v: Variant, recompute: tuple[str, ...]) -> np.ndarray:
    """Per ``recompute`` value, stage and model chunk, the seconds its dense layers re-run per micro-batch at the
    slowest GPU's pace (:meth:`~simulator.compute.layer.LayerTime.recompute_s`, as the chunk costs add them; the
    MoE layers' and a partial ``recompute_layers`` full recompute counted as 0: a lower bound)."""
    p = v.plan.parallel
    out = np.zeros((len(recompute), *v.f.shape))
    if v.layer is None:
        return out
    for i, value in enumerate(recompute):
        mode, _, modules = value.partition(":")
        if mode == "none" or (mode == "full" and p.recompute_layers is not None):
            continue
        given = p.model_copy(update={"recompute": mode, "recompute_modules": tuple(modules.split(",")) if modules
                                     else None})
        out[i] = v.dense * (v.layer.recompute_s(mode, given.recomputed_modules) * v.slowest)
    return out


def dense_counts(plan) -> np.ndarray:
    """Per stage and model chunk of ``plan``, its dense (not MoE) layers."""
    if plan.model.moe is None:
        return np.array(plan.stage_chunks, dtype=float)
    out = np.zeros((plan.parallel.pp, len(plan.stage_chunks[0])))
    for s in range(plan.parallel.pp):
        flags, start = moe_flags_of(plan.model, plan.stage_layers[s]), 0
        for c, n in enumerate(plan.stage_chunks[s]):
            out[s, c] = n - sum(flags[start:start + n])
            start += n
    return out


def variants_of(ctx, plan, overlaps: tuple[bool, ...], inputs=None) -> list[Variant]:
    """The :class:`Variant` of ``plan`` for each TP overlap value of ``overlaps``: per chunk its compute seconds at
    the slowest GPU's pace plus the least exposed communication of the members with that value
    (:func:`~simulator.search.exposed_bound.chunk_exposure`). A dense model: the compute from its layer, embedding
    and head times alone (the step's cached :func:`~simulator.schedule.inputs.layer_times` and the chunk bases'
    embedding and head, at the slowest GPU's pace, as :func:`~simulator.schedule.step.prepare_step` takes them); a
    MoE model (whose MoE layers on an EP group run the busiest rank's experts): from the chunk costs of
    :func:`~simulator.schedule.step.prepare_step`. ``inputs``: the plan's
    :class:`~simulator.schedule.inputs.LayerInputs` where the caller has them (None: from the plan)."""
    dense = dense_counts(plan)
    settings = ctx.fixed.moe or DEFAULT_MOE_SETTINGS
    if plan.model.moe is None:
        t = dense_layer_time(ctx, plan, inputs)
        f, b = dense * t.layer.fwd_s, dense * t.layer.bwd_s
        f[0, 0] += t.embedding.fwd_s             # as the chunk costs add them (simulator.schedule.chunks)
        b[0, 0] += t.embedding.bwd_s
        last = plan.last_stage_rank
        f[last, -1] += t.head.fwd_s
        b[last, -1] += t.head.bwd_s
        timer = GroupTimer(plan, ctx.topology, ctx.calibration, settings, shared=ctx.step_cache.layout(plan))
        f, b, layer, slowest, paired = f * t.slowest, b * t.slowest, t.layer, t.slowest, False
        exposure = (ctx.step_cache, t.fixed, plan, timer, t.inputs, None)
    else:
        parts = prepare_step(ctx.fixed.model, plan, ctx.topology, calibration=ctx.calibration, moe=ctx.fixed.moe,
                             gpu_speed_sigma=ctx.fixed.system.gpu_speed_sigma, cache=ctx.step_cache,
                             offload_activation_bytes=offloaded_activation_bytes(plan))
        step, p = parts.ctx, parts.ctx.plan.parallel
        f = np.array([[x.compute for x, _ in c] for c in parts.chunks])
        b = np.array([[x.compute for _, x in c] for c in parts.chunks])
        layer, slowest, paired = step.layers.get(False), parts.slowest, parts.pairing() is not None
        moe = MoeInputs(step.timer, step.layer, p.etp, p.pp) if True in step.layers and p.ep > 1 else None
        exposure = (ctx.step_cache, step.fixed, step.plan, step.timer, step.layer, moe)
    return [Variant(plan, f + xf, b + xb, dense, layer, slowest, paired, on)
            for on, (xf, xb) in zip(overlaps, chunk_exposure(*exposure, overlaps, dense), strict=True)]


class DenseTimes(NamedTuple):
    """What a dense model's variant reads of the step cache (:func:`dense_layer_time`)."""

    layer: Any
    """the dense layer's :class:`~simulator.compute.layer.LayerTime`"""
    slowest: float
    embedding: Any
    head: Any
    fixed: Any
    """the cache's :class:`~simulator.schedule.cache.Fixed`"""
    inputs: Any
    """the plan's :class:`~simulator.schedule.inputs.LayerInputs`"""


def dense_layer_time(ctx, plan, inputs=None) -> DenseTimes:
    """The dense layer's :class:`~simulator.compute.layer.LayerTime` of ``plan`` (a dense model), the slowest
    GPU's pace and the embedding's and the head's times, through the search's step cache (what
    :func:`~simulator.schedule.inputs.build_inputs`, :func:`~simulator.schedule.step.prepare_step` and the chunk
    bases read); ``inputs``: the plan's layer inputs where the caller has them (None: from the plan)."""
    gpu = ctx.topology.cluster.node.gpu
    eff = default_efficiency(gpu.architecture)
    settings = ctx.fixed.moe or DEFAULT_MOE_SETTINGS
    fixed = ctx.step_cache.fixed(plan.model, gpu, eff, ctx.topology, ctx.calibration, settings)
    li = layer_inputs(plan, plan.gemm_dtype(gpu), settings) if inputs is None else inputs
    layers = dict(ctx.step_cache.get(layer_times, fixed, li))
    copy = holds_embedding_copy(plan.model, plan.training.mode == "train", plan.last_stage_rank)
    return DenseTimes(layers[False], slowest_pace(plan.world_size, ctx.fixed.system.gpu_speed_sigma,
                                                  eff.calibration_gpus),
                      embedding_of(ctx.step_cache, fixed, li),
                      head_of(ctx.step_cache, fixed, li, copy, plan.recipe.cross_entropy), fixed, li)
