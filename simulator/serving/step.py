"""Time of one serving step (a prefill chunk or a decode step) op by op on one replica (docs/serving.md).

A step processes a :class:`~simulator.plan.Batch` under the scenario's plan: ``seqs`` sequences, each adding ``new``
tokens on top of ``past`` cached ones (prefill: past 0, new = the prompt or a chunk of it; decode: new 1, past =
context - 1); the rank's share of each layer is the plan's shape of that batch (``ResolvedPlan.shape_of``). Per layer
on one rank:

- GEMMs (q/k/v fused, o, MLP or router + routed and shared experts, LM head on the last token of each sequence) at
  :func:`simulator.compute.gemm.gemm_times`: ``launch + max(FLOPs / (peak x efficiency), bytes / (HBM x
  memory_efficiency))``; at decode sizes the weight bytes bound them.
- Attention: decode streams the K/V cache (``seqs x context x cache bytes per token and layer``) at the attention
  kernel's rate (:mod:`simulator.serving.backends`); prefill runs causal FLOPs ``4 x seqs x new x (past + new/2) x
  d x heads`` at the forward FlashAttention rate.
- Memory-bound kernels (norms, residual adds, RoPE, activation, K/V cache write) at HBM bandwidth, and
  ``launch_s`` for each small kernel of the kernel set.
- MoE: routed experts touch ``E_local (1 - (1 - k/E)^(tokens in the EP group))`` local experts in expectation, each
  GEMM'd at the expert kernel's efficiency, times the routing's load imbalance (max over EP ranks / mean: 1 with
  expected counts; with ``moe.seed`` a decode step samples one batch's routing, prefill keeps expected counts);
  dispatch and combine by the phase's all-to-all backend.
- TP: two all-reduces of ``tokens x h`` per layer (latency regime at decode: the collectives model's LL/NVLS/tree
  choice, or a measured custom kernel); the LM head's logits gathered over TP. PP: one send/recv of ``tokens x h /
  tp`` per stage boundary; prefill runs the stages one after another, decode keeps up to ``pp`` micro-batches in
  flight (``step_time(microbatches=...)``).
- Without CUDA graphs (``cuda_graphs: false``, always for prefill, and for any step whose all-to-all backend cannot be
  captured: DeepEP's normal kernels) the host issues every kernel: the step takes at least
  ``kernels x host_launch_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.gemm import gemm_times, peak_flops
from simulator.hardware import GpuSpec
from simulator.hardware.calibration import Calibration
from simulator.implementation.serving import ServingConfig
from simulator.memory.inference import kv_cache_bytes_per_token_layer
from simulator.model import ModelSpec
from simulator.model.flops import expert_mlp_ops, layer_flops
from simulator.model.shape import RankShape
from simulator.moe import MoeSettings
from simulator.plan import Batch, ResolvedPlan, serving_backend
from simulator.pricing.groups import GroupTimer
from simulator.program.memops import LayerShape, eager_memops, embedding_memops, layer_memops
from simulator.serving import backends as B
from simulator.topology import Topology
from simulator.traffic.ops import CommOp

#: op classes of the step breakdown (seconds per step on the critical path)
OP_CLASSES = ("gemm", "attention", "memory_ops", "launch", "experts", "tp_comm", "ep_comm", "pp_comm", "host")


@dataclass(frozen=True)
class StepTime:
    """One step's seconds (``step_s``), its breakdown by op class, kernels launched and the comm ops priced."""

    step_s: float
    breakdown_s: dict[str, float]
    kernels: int
    gpu_s: float
    comm: tuple[dict, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"step_s": self.step_s, "gpu_s": self.gpu_s, "kernels": self.kernels,
                "breakdown_s": dict(self.breakdown_s), "comm": list(self.comm)}


@dataclass(frozen=True)
class StepContext:
    """What every step of one scenario shares: hardware, coefficients, the serving choices."""

    model: ModelSpec
    gpu: GpuSpec
    eff: ComputeEfficiency
    serving: ServingConfig
    moe_settings: MoeSettings
    topology: Topology
    calibration: Calibration | None = None


def _fwd_gemms(model: ModelSpec, sh: RankShape, layer: int) -> list:
    """Forward GEMMs of one layer without attention core and routed experts; q/k/v fused into one GEMM."""
    ops = [o for o in layer_flops(model, sh, layer_index=layer).ops
           if o.phase == "fwd" and not o.name.startswith(("attn.", "experts."))]
    qkv = [o for o in ops if o.name in ("q_proj", "k_proj", "v_proj")]
    if len(qkv) == 3:
        fused = type(qkv[0])("qkv_proj", "fwd", qkv[0].m, qkv[0].k, sum(o.n for o in qkv), 1)
        ops = [fused] + [o for o in ops if o not in qkv]
    return ops


def _gemm_s(ops, ctx: StepContext, dtype: str) -> float:
    if not ops:
        return 0.0
    arr = [np.array([getattr(o, a) for o in ops], dtype=float) for a in ("m", "k", "n", "batch")]
    return float(np.sum(gemm_times(*arr, ctx.gpu, ctx.eff, dtype)))


def _mem_s(nbytes: float, ctx: StepContext) -> float:
    return nbytes / (ctx.gpu.memory.bandwidth * ctx.eff.memory_efficiency)


def touched_experts(model: ModelSpec, rp: ResolvedPlan, tokens_per_rank: float) -> float:
    """Expected local experts that receive at least one token: ``E_local (1 - (1 - k/E)^(tokens x ep))``."""
    moe, ep = model.moe, rp.parallel.ep
    local = moe.experts / ep
    return local * (1.0 - (1.0 - moe.top_k / moe.experts) ** (tokens_per_rank * ep))


def _experts(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, stage: int, dtype: str) -> tuple[float, float]:
    """(expert GEMM seconds, load imbalance) of one MoE layer: touched experts share the routed rows."""
    model, sh = ctx.model, timer.shape
    kernel = B.EXPERT_KERNELS[ctx.serving.expert_kernel]
    touched = max(touched_experts(model, rp, sh.norm_tokens), 1e-9)
    rows = sh.routed_rows / touched
    imbalance = timer.moe_routing(stage).imbalance if rp.parallel.ep > 1 else 1.0
    ops = expert_mlp_ops(model, rows, sh.etp, batch=touched)
    ops = [o for o in ops if o.phase == "fwd"]
    secs = _gemm_s(ops, ctx, dtype)
    grouped = ctx.eff.grouped_fraction(dtype) * kernel.relative(rows)
    return ctx.eff.launch_s * len(ops) + (secs - ctx.eff.launch_s * len(ops)) / grouped * imbalance, imbalance


def _decode_kernel(ctx: StepContext) -> B.AttentionKernel:
    """The decode attention kernel: ``flash_decoding`` means FlashMLA for MLA models (what vLLM and SGLang run)."""
    name = ctx.serving.attention
    if name == "flash_decoding" and ctx.model.mla is not None:
        name = "flash_mla"
    return B.ATTENTION_KERNELS[name]


def _attention_s(ctx: StepContext, rp: ResolvedPlan, batch: Batch) -> float:
    """Core attention of one layer on one rank (module docstring)."""
    model, sh, gpu = ctx.model, rp.shape_of(batch), ctx.gpu
    seqs, new, past = batch.sequences, batch.new, batch.cached
    kv_bytes = seqs * (past + new) * kv_cache_bytes_per_token_layer(rp)
    mla = model.mla
    if mla is not None and new == 1:  # absorbed MLA decode: scores over the latent + rope key, values the latent
        width = (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
    else:
        width = (mla.qk_head_dim if mla is not None else model.dhead) + model.dhead_v
    flops = 2.0 * seqs * new * (past + (new + 1) / 2.0) * width * sh.heads_tp
    L = past + new
    fa = B.PREFILL_ATTENTION
    fa_rate = peak_flops(gpu, "bf16") * fa["efficiency"] * L / (L + fa["half_seq"])
    if new > 1:
        return ctx.eff.launch_s + max(flops / fa_rate, _mem_s(kv_bytes, ctx))
    kernel = _decode_kernel(ctx)
    rate = gpu.memory.bandwidth * kernel.kv_read_efficiency
    if not kernel.split_kv:
        ctas = seqs * (sh.heads_tp if mla is not None else sh.kv_heads_tp)
        rate = min(rate, ctas * kernel.per_cta_Bps)
    compute_rate = fa_rate if kernel.compute_efficiency is None else peak_flops(gpu, "bf16") * kernel.compute_efficiency
    return ctx.eff.launch_s + max(kv_bytes / rate, flops / compute_rate)


def _memops_s(ctx: StepContext, rp: ResolvedPlan, layer: int, batch: Batch) -> float:
    model, sh, tokens = ctx.model, rp.shape_of(batch), batch.tokens
    moe = model.is_moe_layer(layer)
    shape = LayerShape(tokens=tokens, norm_tokens=tokens, scores=0.0, ffn_local=0.0 if moe else sh.ffn,
                       qk_width=(sh.heads_tp + sh.kv_heads_tp) * model.dhead)
    ops = layer_memops(model, shape, unfused_attention=False, moe_routed_tokens=sh.routed_rows if moe else 0.0)
    kset = B.KERNEL_SETS[ctx.serving.kernels]
    if kset.eager_layout:
        ops += eager_memops(model, shape, 0.0, amp=False)
    nbytes = sum(o.bytes for o in ops if o.phase == "fwd")
    nbytes += tokens * (kset.rope_extra_bytes * shape.qk_width + kset.swiglu_extra_bytes * shape.ffn_local)
    nbytes += 2 * tokens * kv_cache_bytes_per_token_layer(rp)  # write the new K/V (read the projection, write cache)
    return _mem_s(nbytes, ctx)


def _comm(timer: GroupTimer, op: CommOp, stage: int, log: list, dim: str | None = None) -> float:
    t = timer.time(op, stage)
    if t.call_s > 0:
        log.append({"dim": dim or op.dim, "op": op.op, "bytes": op.bytes, "algorithm": t.algorithm, "link": t.link,
                    "time_s": t.call_s, "name": op.name})
    return t.call_s


def _ep_comm(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, stage: int, log: list) -> float:
    """Dispatch + combine of one MoE layer on this rank's EP group, by the phase's all-to-all backend (the plan's)."""
    if rp.parallel.ep == 1:
        return 0.0
    tokens = timer.shape.norm_tokens
    if rp.moe_backend.collective:
        size = tokens * rp.parallel.ep * ctx.model.hidden * rp.recipe.activation
        # priced as collectives on the EP group (dim "ep" would route the op to the MoE kernels)
        return (_comm(timer, CommOp("ep_collective", "ep", "all_gather", size, 1, "layer_fwd", "none",
                                    "tokens (all-gather)"), stage, log, "ep")
                + _comm(timer, CommOp("ep_collective", "ep", "reduce_scatter", size, 1, "layer_fwd", "none",
                                      "outputs (reduce-scatter)"), stage, log, "ep"))
    comm = timer.moe_comm(stage)
    name = rp.moe_backend.name
    for what, k in (("dispatch", comm.forward.dispatch), ("combine", comm.forward.combine)):
        log.append({"dim": "ep", "op": what, "bytes": float(k.counted_bytes), "algorithm": timer.moe_algorithm(stage),
                    "link": k.bottleneck, "time_s": float(k.time_s), "name": name})
    return float(comm.forward.dispatch.time_s + comm.forward.combine.time_s)


def _tp_all_reduce(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, stage: int, size: float, name: str,
                   log: list) -> float:
    """One TP all-reduce: the serving engine's custom kernel where its measured table applies (Hopper, the TP group
    on NVLink in one node, a TP size and buffer the table covers), else the NCCL collectives model."""
    table = B.TP_ALLREDUCE[ctx.serving.tp_allreduce]
    op = CommOp("tp", "tp", "all_reduce", size, 1, "layer_fwd", "none", name)
    if table is not None and ctx.gpu.architecture == table.architecture:
        model = timer.model("tp", stage)
        t = table.time_s(rp.parallel.tp, size) if model.placement.n_nodes == 1 and timer.link(model) == "nvlink" \
            else None
        if t is not None:
            log.append({"dim": "tp", "op": "all_reduce", "bytes": size, "algorithm": ctx.serving.tp_allreduce,
                        "link": "nvlink", "time_s": t, "name": name})
            return t
    return _comm(timer, op, stage, log)


def _moe_settings(ctx: StepContext, phase: str) -> MoeSettings:
    """The scenario's ``moe:`` settings for the phase (the backend is the plan's: :func:`step_time`)."""
    settings = ctx.moe_settings
    if phase == "prefill" and settings.seed is not None:
        # thousands of tokens per rank average the routing out; decode samples one batch
        return type(settings).model_validate({**settings.model_dump(), "seed": None})
    return settings


def _layer(ctx, rp, timer, stage, layer, batch, acc, log) -> None:
    """Add one layer's seconds to ``acc`` (by op class)."""
    dtype = rp.gemm_dtype(ctx.gpu)
    tokens = batch.tokens
    acc["gemm"] += _gemm_s(_fwd_gemms(ctx.model, rp.shape_of(batch), layer), ctx, dtype)
    acc["attention"] += _attention_s(ctx, rp, batch)
    acc["memory_ops"] += _memops_s(ctx, rp, layer, batch)
    kset = B.KERNEL_SETS[ctx.serving.kernels]
    acc["launch"] += max(kset.per_layer - 5, 0) * ctx.eff.launch_s  # small kernels beyond 4 GEMMs + attention
    if ctx.model.is_moe_layer(layer):
        acc["experts"] += _experts(ctx, rp, timer, stage, dtype)[0]
        acc["ep_comm"] += _ep_comm(ctx, rp, timer, stage, log)
    if rp.parallel.tp > 1:
        size = tokens * ctx.model.hidden * rp.recipe.activation
        for name in ("attention output", "mlp output"):
            acc["tp_comm"] += _tp_all_reduce(ctx, rp, timer, stage, size, name, log)


def _stage(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, stage: int, batch: Batch,
           log: list) -> tuple[dict[str, float], int]:
    """Seconds by op class and kernels of one pipeline stage for one step (its outgoing hand-off included)."""
    model, p, seqs = ctx.model, rp.parallel, batch.sequences
    kset = B.KERNEL_SETS[ctx.serving.kernels]
    acc = dict.fromkeys(OP_CLASSES, 0.0)
    # MTP modules (model.mtp_layers, after the last layer) only run under speculative decoding: not modelled
    layers = [layer for layer in rp.stage_layers[stage] if layer < model.layers]
    kernels = kset.per_layer * len(layers) + kset.per_moe_layer * sum(map(model.is_moe_layer, layers))
    kinds: dict[bool, list[int]] = {}
    for layer in layers:  # layers of one kind (dense / MoE) cost the same: price one, count all
        kinds.setdefault(model.is_moe_layer(layer), []).append(layer)
    for group in kinds.values():
        one = dict.fromkeys(OP_CLASSES, 0.0)
        before = len(log)
        _layer(ctx, rp, timer, stage, group[0], batch, one, log)
        for entry in log[before:]:
            entry["count"] = len(group)
        for key, value in one.items():
            acc[key] += value * len(group)
    if stage == 0:
        acc["memory_ops"] += _mem_s(sum(o.bytes for o in embedding_memops(model, batch.tokens) if o.phase == "fwd"),
                                    ctx) + ctx.eff.launch_s
    if stage == p.pp - 1:
        kernels += kset.per_step
        head = np.array([[seqs, model.hidden, model.vocab / p.tp, 1]], dtype=float).T
        acc["gemm"] += float(gemm_times(*head, ctx.gpu, ctx.eff, rp.gemm_dtype(ctx.gpu))[0])
        acc["launch"] += 2 * ctx.eff.launch_s  # final norm, sampler
        if p.tp > 1:
            acc["tp_comm"] += _comm(timer, CommOp("tp", "tp", "all_gather", seqs * model.vocab * 2, 1,
                                                  "step", "none", "logits"), stage, log)
    else:
        size = batch.tokens * model.hidden * rp.recipe.activation / p.tp
        acc["pp_comm"] += _comm(timer, CommOp("pp", "pp_pair", "sendrecv", size, 1, "boundary", "none",
                                              "activations"), stage, log)
    return acc, kernels


def step_time(ctx: StepContext, rp: ResolvedPlan, batch: Batch, *, phase: str, graphs: bool,
              microbatches: int = 1) -> StepTime:
    """One step of ``batch`` (its sequences adding ``new`` tokens on ``cached`` ones; module docstring) under the
    scenario's plan ``rp``: the rank shape is ``rp.shape_of(batch)``.

    ``microbatches`` m > 1 (pipeline parallelism, decode): the step's sequences are m micro-batches of ``seqs`` each
    in flight over the stages at once (vLLM's virtual engines); every sequence advances one token in
    ``max(sum of stage times, m x the slowest stage)`` (one traversal, or the slowest stage busy with all m); the
    breakdown is scaled to that total."""
    rp = rp.with_moe_backend(serving_backend(ctx.serving.all2all_backend).for_phase(phase))  # the phase's backend
    timer = GroupTimer(rp, ctx.topology, calibration=ctx.calibration, moe=_moe_settings(ctx, phase), batch=batch)
    log: list[dict] = []
    model, p = ctx.model, rp.parallel
    stages = [_stage(ctx, rp, timer, stage, batch, log) for stage in range(p.pp)]
    acc = {key: sum(a[key] for a, _ in stages) for key in OP_CLASSES}
    kernels = microbatches * sum(k for _, k in stages)
    gpu_s = sum(acc.values())
    if microbatches > 1:
        pipelined = max(gpu_s, microbatches * max(sum(a.values()) for a, _ in stages))
        acc = {key: value * pipelined / gpu_s for key, value in acc.items()}
        gpu_s = pipelined
    if model.moe is not None and p.ep > 1 and not rp.moe_backend.graph_capturable:
        graphs = False  # the step cannot be captured: the host issues every kernel
    kset = B.KERNEL_SETS[ctx.serving.kernels]
    # two tensor-parallel all-reduces per layer (attention and MLP outputs), issued through torch.distributed
    collectives = 2 * microbatches * sum(layer < model.layers for s in range(p.pp) for layer in rp.stage_layers[s]) \
        if p.tp > 1 else 0
    kernels += collectives
    host = 0.0 if graphs else (kernels - collectives) * kset.host_launch_s + collectives * kset.collective_host_s
    if host > gpu_s:
        acc["host"] = host - gpu_s
    return StepTime(step_s=max(gpu_s, host), breakdown_s=acc, kernels=kernels, gpu_s=gpu_s, comm=tuple(log))
