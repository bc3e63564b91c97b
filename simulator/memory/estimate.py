"""Per-GPU memory of every pipeline stage: model states by sharding rule, activations by schedule, buffers.

Entry point :func:`estimate_memory`. Every number is a :class:`MemoryItem` with its formula; buckets follow
docs/interface.md (weights, gradients, main_params, optimizer, activations, other) plus transient buffers for the peak.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from simulator.caching import IdentityCache, memo
from simulator.hardware.cluster import ClusterSpec
from simulator.memory.activations import ActContext, cached_layer_items
from simulator.memory.buffers import buffer_items, fixed_buffer_items, stage_extra_activations
from simulator.memory.items import MemoryItem, MemoryReport, StageMemory
from simulator.memory.lifetimes import backward_phases
from simulator.memory.nccl import nccl_bytes
from simulator.memory.runtime import ALLOCATOR_CACHE_BYTES, RUNTIME_BYTES
from simulator.model.spec import moe_flags_of
from simulator.plan.params import StageParams, stage_params
from simulator.plan.recipe import FP8, FP32, Recipe
from simulator.plan.resolved import ResolvedPlan


def _state_items(sp: StageParams, rb: Recipe, rp: ResolvedPlan) -> list[MemoryItem]:
    """weights, gradients, main_params, optimizer: dense states sharded over d = dp*cp*ulysses, expert states over
    expert-dp, per the sharding stage (docs/memory.md, "Precision recipes")."""
    return list(_states(sp, rb, rp.dense_shard_degree, rp.expert_shard_degree, rp.offload.gpu_keep()))


@memo(maxsize=4096)
def _states(sp: StageParams, rb: Recipe, d_dense: int, d_exp: int,
            keep: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)) -> tuple[MemoryItem, ...]:
    """:func:`_state_items` from what it reads (hashable), once per distinct value (plans of a search share it).
    ``keep``: the share of each bucket's owned bytes left on the GPU by offload (:meth:`Offload.gpu_keep`; the
    gradients' share only where they are sharded, ZeRO 2-3: a stage-1 gradient buffer stays whole)."""
    rows = [("weights", rb.param, 3), ("gradients", rb.grad, 2), ("main_params", rb.main, 1),
            ("optimizer", rb.moments, 1)]
    items = []
    for (bucket, per, min_stage), kept in zip(rows, keep, strict=True):
        if bucket == "gradients" and rb.stage < 2:
            kept = 1.0
        if per == 0:
            continue
        for label, n, d in (("dense", sp.dense, d_dense), ("expert", sp.expert, d_exp)):
            if n == 0:
                continue
            shard = d if rb.stage >= min_stage else 1
            host = "" if kept == 1.0 else f" x {kept:g} on the GPU (offload)"
            items.append(MemoryItem(bucket, f"{bucket}.{label}", n * per / shard * kept,
                                    f"{n:.4g} params x {per:g} B / {shard} ({rb.convention}, stage {rb.stage}){host}",
                                    scaling="fixed"))
    return tuple(items)


def activation_context(rp: ResolvedPlan, moe_load: str = "expected") -> ActContext:
    """The plan's :class:`ActContext`: its rank shape and the recipe's accounting choices (the multimodal layer
    prices its cross-attention and pooler activations under the same one)."""
    return ActContext(rp.shape, recompute=rp.parallel.recompute, attention=rp.training.attention,
                      pytorch_layout=rp.recipe.eager, dtype_bytes=rp.recipe.activation,
                      moe_load=moe_load, recompute_modules=rp.parallel.recomputed_modules or None,
                      selective_op=rp.parallel.selective_ac_option == "op",
                      act_input_bytes=FP8 if rp.recipe.act_input_fp8 else None,
                      residual_bytes=FP32 if rp.recipe.amp_casts else None,
                      norm_upcast=rp.training.profile.norm == "upcast", sdpa_gqa=rp.training.profile.sdpa_gqa,
                      separate_projections=rp.training.profile.separate_projections,
                      index_add_source=rp.training.profile.moe_permute == "hf_expert_loop")


def _layer_keys(rp: ResolvedPlan, stage: int) -> list[tuple[bool, str]]:
    """(MoE layer?, recompute mode) of each layer of ``stage`` (block recompute: only some layers recompute)."""
    return list(zip(moe_flags_of(rp.model, rp.stage_layers[stage]), rp.layer_recompute(stage), strict=True))


def _per_layer(rp: ResolvedPlan, ctx: ActContext) -> dict[tuple[bool, str], list]:
    stages = range(rp.parallel.pp)
    if rp.model.moe is None:   # every layer dense: a stage's keys follow from its chunks (its recompute modes)
        stages = {rp.stage_chunks[s]: s for s in reversed(stages)}.values()
    keys = {k for s in stages for k in _layer_keys(rp, s)}
    return {(moe, mode): cached_layer_items(rp.model, replace(ctx, recompute=mode), moe) for moe, mode in keys}


def _activation_items(rp: ResolvedPlan, stage: int, per_layer: dict[tuple[bool, str], list], flight: float
                      ) -> list[MemoryItem]:
    """Per-layer items x layers of that kind (FFN, recompute mode) on the stage x micro-batches in flight."""
    # Megatron's CPU offload (pp 1) moves the first N layers' saved tensors to the host: L - N layers' stay (TE
    # cpu_offload.py OffloadSynchronizer: peak of the saved activations (num_layers - num_offloaded_layers) x T)
    counts = Counter(_layer_keys(rp, stage)[rp.parallel.cpu_offloading_num_layers:])   # in first-seen order
    kinds = tuple((per_layer[key], n) for key, n in counts.items())
    return list(_scaled_by_identity(tuple(items for items, _ in kinds), (tuple(n for _, n in kinds), flight)))


@memo(maxsize=8192)
def _scaled_items(kinds: tuple[tuple[tuple, int], ...], flight: float) -> tuple[MemoryItem, ...]:
    """:func:`_activation_items` from (per-layer items, layer count) of each kind and the micro-batches in flight,
    once per value (plans that differ only in sharding share them)."""
    items = []
    for layer_items, n in kinds:
        for name, b, formula in layer_items:
            items.append(MemoryItem("activations", name, b * n * flight,
                                    f"{formula} x {n} layers x {flight:g} in flight", scaling="in_flight"))
    return tuple(items)


def _scaled_from(items: tuple, values: tuple[tuple[int, ...], float]) -> tuple[MemoryItem, ...]:
    counts, flight = values
    return _scaled_items(tuple(zip(items, counts, strict=True)), flight)


#: :func:`_scaled_items` by the identity of the per-layer item tuples (they come from one cache, so equal values are
#: mostly the same tuple): hashing the items' formulas on every call cost more than scaling them
_scaled_by_identity = IdentityCache(_scaled_from, maxsize=8192)


def bounding_stages(rp: ResolvedPlan) -> tuple[int, ...]:
    """Stages whose memory bounds every stage's, so that their peak is the plan's peak (plan search).

    For a dense model whose middle stages 1..p-2 hold the same number of layers in the same chunks (hence the same
    recompute modes), a middle stage differs from stage 1 only in its micro-batches in flight, which no schedule
    increases with the stage index (:func:`simulator.plan.pipeline.in_flight`): its states, buffers and per-layer
    activations are stage 1's and only stage 0 (embedding) and p-1 (head, logits, MTP) hold more kinds of items.
    So stages 0, 1 and p-1 suffice; otherwise (MoE layer patterns, uneven splits) every stage.
    """
    pp = rp.parallel.pp
    middle = rp.stage_chunks[1:pp - 1]
    if rp.model.moe is None and all(c == middle[0] for c in middle):
        return tuple(sorted({0, min(1, pp - 1), pp - 1}))
    return tuple(range(pp))


def state_floor_bytes(rp: ResolvedPlan, stages: tuple[int, ...], keep: tuple[float, ...] | None = None) -> float:
    """A lower bound of the largest stage peak of :func:`estimate_memory` (plan search prunes by it before building
    the items): the weights, main parameters and optimizer states of each of ``stages`` (and its gradients unless
    they are freed between steps), the largest over them. Every item is non-negative and a stage's peak is the sum
    of its items less at most min(activations, gradients), so the peak is at least this. ``keep``: each bucket's
    share on the GPU in place of the plan's offload's (:meth:`~simulator.plan.offload.Offload.gpu_keep`)."""
    if rp.training.mode == "inference":
        return 0.0
    rb = rp.recipe
    kept = ("weights", "main_params", "optimizer") if rb.grads_freed_between_steps and rp.num_microbatches == 1 \
        else ("weights", "gradients", "main_params", "optimizer")
    d_dense, d_exp = rp.dense_shard_degree, rp.expert_shard_degree
    keep = rp.offload.gpu_keep() if keep is None else keep
    return max(sum(i.bytes for i in _states(stage_params(rp, s), rb, d_dense, d_exp, keep) if i.bucket in kept)
               for s in stages)


def fixed_bytes(rp: ResolvedPlan, stages: tuple[int, ...]) -> tuple[float, ...]:
    """Per stage of ``stages`` (training), the sum of the items of :func:`estimate_memory` that do not depend on the
    micro-batch (``scaling: fixed``: model states and buffers sized by parameters), added in its order (plan search:
    :mod:`simulator.memory.scaling`)."""
    rb, d_dense, d_exp = rp.recipe, rp.dense_shard_degree, rp.expert_shard_degree
    keep = rp.offload.gpu_keep()
    return tuple(_fixed_sum(stage_params(rp, s), rb, d_dense, d_exp, keep) for s in stages)


@memo(maxsize=4096)
def _fixed_sum(sp: StageParams, rb: Recipe, d_dense: int, d_exp: int, keep: tuple[float, ...]) -> float:
    """One stage's :func:`fixed_bytes` from what its items read (``d_dense`` = dp x cp x ulysses is also the DDP
    buckets' replica count), once per value: plans that differ only in micro-batch or recompute share it."""
    return sum(item.bytes for item in list(_states(sp, rb, d_dense, d_exp, keep)) + fixed_buffer_items(d_dense, rb, sp))


def _outside_grad_bytes(items: list[MemoryItem], sp: StageParams) -> float:
    """Gradient bytes of the stage's parameters outside its layers (embedding, final norm, output layer: dense,
    held at the dense gradients' bytes per parameter)."""
    dense = sum(i.bytes for i in items if i.name == "gradients.dense")
    return dense * sp.outside_layers / sp.dense if sp.dense else 0.0


def estimate_memory(rp: ResolvedPlan, hbm_capacity_bytes: float | None = None,
                    stages: tuple[int, ...] | None = None, cluster: ClusterSpec | None = None) -> MemoryReport:
    """Memory per GPU of every pipeline stage of ``rp`` (training; ``training.mode: inference`` gives serving
    memory, :mod:`simulator.memory.inference`).

    Args:
        rp: a plan from :func:`simulator.plan.resolve_plan`.
        hbm_capacity_bytes: GPU memory; when given the report flags OOM and the margin.
        stages: only these stages (default all; :func:`bounding_stages` gives the ones that set the peak).
        cluster: the GPUs the plan runs on; when given, each stage carries NCCL's device bytes
            (:func:`simulator.memory.nccl.nccl_bytes`), which the device peak and the margin include; with a
            DeepEP MoE backend (``rp.moe_backend``) its buffers join NCCL's bytes.
    """
    if rp.training.mode == "inference":
        from simulator.memory.inference import inference_memory

        return inference_memory(rp, hbm_capacity_bytes)
    p = rp.parallel
    rb = rp.recipe
    ctx = activation_context(rp)
    per_layer = _per_layer(rp, ctx)
    worst = None
    if any(moe for moe, _ in per_layer) and rp.model.moe.capacity_factor is None:
        worst = _per_layer(rp, activation_context(rp, "worst"))
    out = []
    for s in range(p.pp) if stages is None else stages:
        flight = rp.schedule.in_flight(p.pp, p.vpp, s, rp.num_microbatches)
        sp_ = stage_params(rp, s)
        items = _state_items(sp_, rb, rp) + _activation_items(rp, s, per_layer, flight)
        items += stage_extra_activations(rp, ctx, s, flight)
        items += buffer_items(rp, ctx, rb, sp_, s)
        worst_bytes = None
        if worst is not None:
            worst_bytes = sum(i.bytes for i in _activation_items(rp, s, worst, flight))
        freed = rb.grads_freed_between_steps and rp.num_microbatches == 1
        phases = ()
        if freed and rb.grads_per_layer:
            phases = backward_phases(items, len(rp.stage_layers[s]), _outside_grad_bytes(items, sp_))
        out.append(StageMemory(s, tuple(items), worst_bytes, gradients_freed=freed,
                               nccl_bytes=0.0 if cluster is None else nccl_bytes(rp, cluster, s).total,
                               phases=phases))
    return MemoryReport(tuple(out), hbm_capacity_bytes, rp.notes, RUNTIME_BYTES + ALLOCATOR_CACHE_BYTES)
