"""Pipeline and data-parallel communication of a plan, and the whole traffic of one step.

PP (Narayanan et al., SC'21, Sec. 2.2 and 4.1): each micro-batch crosses every virtual-stage boundary forward
(activations) and backward (their gradients) as sendrecv of b*s*h (divided by CP and Ulysses, and by TP: the
scatter/gather optimisation, or the sequence-parallel shard, sends 1/t from each TP rank; without SP the receiver
all-gathers the full tensor over the TP group). Interleaving multiplies the boundaries by vpp. Megatron's
send/recv calls block the compute stream (no ``overlap_p2p_comm``), so the schedule charges them to each op.

DP (docs/step_time.md, data-parallel traffic), G = gradient bytes (``Recipe.grad_wire``: 4 per element with
Megatron bf16 / fp8 and with AMP or fp32; 2 with fp16, pure bf16, and DeepSpeed ZeRO / PyTorch 16-bit gradients),
parameters gathered as held (``Recipe.param_wire``: 16-bit, fp8 primary weights in fp8, fp32 params in fp32):
- stage 0 (DDP): all-reduce G once per step;
- stage 1 (ZeRO-1, distributed optimizer, Megatron-FSDP ``optim``): reduce-scatter G per step, all-gather the
  parameters after the optimizer step (or, with ``overlap_param_gather``, under the next forward);
- stage 2 (ZeRO-2, ``optim_grads``): reduce-scatter G every micro-batch (gradients are kept sharded), parameter
  all-gather per step;
- stage 3 (ZeRO-3, FSDP, ``optim_grads_params``): all-gather the parameters before each micro-batch's forward and
  again before its backward, reduce-scatter G every micro-batch.
Dense weights reduce over dp x cp x ulysses (``dp_cp``), expert weights over expert-dp (``edp``). A tied embedding
on a pipeline syncs its gradient between the first and the last stage (all-reduce, charged to ``pp``; none with
DualPipeV, whose last stage runs on rank 0 beside the embedding: ``ResolvedPlan.last_stage_rank``).

DualPipe (``schedule: dualpipe``): rank i holds stage i of one copy of the model and stage pp-1-i of the other, so
after the last backward ranks i and pp-1-i all-reduce the gradients of both stages (G of the rank's two stages, the
"DualPipe copy gradients", charged to ``pp``, not overlapped; deepseek-ai/DualPipe README at 3da1bbe: two copies
of the parameters per device). Its DP reduction carries both stages' gradients (``stage_params`` sums them).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.plan import ResolvedPlan
from simulator.plan.params import StageParams, stage_params
from simulator.traffic.layer import layer_traffic
from simulator.traffic.ops import CommOp

RECEIVE = " (receive)"
"""Name suffix of a pipeline transfer's receiving call when the profile's ``pipeline_p2p`` is ``separate``."""
FP32_GRAD = 4
"""Bytes per element of BF16_Optimizer's fp32 gradient (``weight._hp_grad``), which its tied-embedding sync
all-reduces."""


def pipeline_traffic(rp: ResolvedPlan) -> tuple[CommOp, ...]:
    """Activation (forward) and gradient (backward) sendrecv per micro-batch per virtual-stage boundary."""
    p = rp.parallel
    if p.pp == 1:
        return ()
    size = rp.shape.tokens * rp.model.hidden * rp.recipe.activation / p.tp
    ops = (CommOp("pp", "pp_pair", "sendrecv", size, 1, "boundary", "none", "activations"),
           CommOp("pp", "pp_pair", "sendrecv", size, 1, "boundary", "none", "activation gradients"))
    if p.tp > 1 and not p.sp:   # the receiver re-assembles the full activation over NVLink (scatter/gather)
        ops += (CommOp("pp", "tp", "all_gather", size * p.tp, 1, "boundary", "none", "received activation gather"),
                CommOp("pp", "tp", "all_gather", size * p.tp, 1, "boundary", "none", "received gradient gather"))
    if rp.training.profile.pipeline_p2p == "separate":   # each receive is its own blocking call (DeepSpeed)
        ops += (CommOp("pp", "pp_pair", "sendrecv", size, 1, "boundary", "none", "activations" + RECEIVE),
                CommOp("pp", "pp_pair", "sendrecv", size, 1, "boundary", "none", "activation gradients" + RECEIVE))
    return ops


def bf16_all_reduce(rp: ResolvedPlan) -> bool:
    """Whether the plan's ZeRO-1 runs as DeepSpeed's BF16_Optimizer (the profile's ``bf16_grad_sync``): bf16,
    sharding stage 1, the whole gradient all-reduced."""
    return (rp.training.profile.bf16_grad_sync == "all_reduce" and rp.recipe.precision == "bf16"
            and rp.recipe.stage == 1)


def _dp_ops(rp: ResolvedPlan, params: float, group: str, label: str) -> list[CommOp]:
    p, r = rp.parallel, rp.recipe
    d = rp.dense_shard_degree if group == "dp_cp" else rp.expert_shard_degree
    if d == 1 or params == 0:
        return []
    g, w = params * r.grad_wire, params * r.param_wire
    grad_overlap = "backward" if (p.overlap_grad_reduce or r.eager) else "none"   # PyTorch DDP/FSDP always overlap
    gather_overlap = "forward" if p.overlap_param_gather else "none"
    stage = r.stage
    if stage == 0:
        return [CommOp("dp", group, "all_reduce", g, 1, "step", grad_overlap, f"{label} gradients")]
    if stage == 1 and bf16_all_reduce(rp):   # BF16_Optimizer: all-reduce, then gather the updated bf16 shards
        return [CommOp("dp", group, "all_reduce", g, 1, "step", grad_overlap, f"{label} gradients"),
                CommOp("dp", group, "all_gather", w, 1, "step", gather_overlap, f"{label} parameters")]
    if stage in (1, 2):
        scope = "step" if stage == 1 else "microbatch"
        return [CommOp("dp", group, "reduce_scatter", g, 1, scope, grad_overlap, f"{label} gradients"),
                CommOp("dp", group, "all_gather", w, 1, "step", gather_overlap, f"{label} parameters")]
    return [CommOp("dp", group, "all_gather", w, 1, "microbatch", "forward", f"{label} parameters (forward)"),
            CommOp("dp", group, "all_gather", w, 1, "microbatch", "backward", f"{label} parameters (backward)"),
            CommOp("dp", group, "reduce_scatter", g, 1, "microbatch", "backward", f"{label} gradients")]


def data_parallel_traffic(rp: ResolvedPlan, stage: int) -> tuple[CommOp, ...]:
    """DP ops of one pipeline stage (dense over dp_cp, experts over edp), plus the tied-embedding sync."""
    sp = stage_params(rp, stage)
    ops = _dp_ops(rp, sp.dense, "dp_cp", "dense") + _dp_ops(rp, sp.expert, "edp", "expert")
    m, p = rp.model, rp.parallel
    if m.tied_embeddings and rp.last_stage_rank > 0 and stage in (0, rp.last_stage_rank):
        size = m.vocab * m.hidden / p.tp * (FP32_GRAD if bf16_all_reduce(rp) else rp.recipe.grad_wire)
        ops.append(CommOp("pp", "embedding", "all_reduce", size, 1, "step", "none", "tied embedding gradients"))
    if rp.schedule.mirrored:
        size = (sp.dense + sp.expert) * rp.recipe.grad_wire
        ops.append(CommOp("pp", "pp_mirror", "all_reduce", size, 1, "step", "none", "DualPipe copy gradients"))
    return tuple(ops)


@dataclass(frozen=True)
class StepTraffic:
    """All comm ops of one step: per layer, per pipeline boundary, and per stage (DP and embedding)."""

    layer: tuple[CommOp, ...]
    pipeline: tuple[CommOp, ...]
    stages: tuple[tuple[CommOp, ...], ...]
    params: tuple[StageParams, ...]


def step_traffic(rp: ResolvedPlan, stages: tuple[tuple[tuple[CommOp, ...], ...], tuple[StageParams, ...]] | None
                 = None) -> StepTraffic:
    """The traffic of every parallel dimension of the plan (module docstring for the rules); ``stages``: the
    plan's :func:`stage_traffic`, when the caller has it (plan search: plans that differ only in micro-batch share
    it)."""
    per_stage, params = stage_traffic(rp) if stages is None else stages
    return StepTraffic(layer_traffic(rp), pipeline_traffic(rp), per_stage, params)


def stage_traffic(rp: ResolvedPlan) -> tuple[tuple[tuple[CommOp, ...], ...], tuple[StageParams, ...]]:
    """Each stage's DP and embedding ops (:func:`data_parallel_traffic`) and parameters: a pure function of the
    model, ``rp.parallel``, ``rp.world_size``, ``rp.recipe`` and ``rp.stage_layers`` (what
    :func:`data_parallel_traffic` and :func:`stage_params` read; not the micro-batch)."""
    pp = rp.parallel.pp
    params = tuple(stage_params(rp, s) for s in range(pp))
    by_value: dict[tuple, tuple[CommOp, ...]] = {}   # a stage's DP ops follow from its parameters and whether it
    stages = []                                       # is the first or last one (middle stages share them)
    for s, sp in enumerate(params):
        key = (sp, s == 0, s == pp - 1)
        if key not in by_value:
            by_value[key] = data_parallel_traffic(rp, s)
        stages.append(by_value[key])
    return tuple(stages), params
