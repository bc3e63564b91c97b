"""Build the program of a transformer layer, the output head, the embedding and a routed-expert FFN: pure
functions from (model, rank shape, the recipe's implementation choices) to a frozen :class:`LayerProgram`.

GEMM shapes come from :func:`simulator.model.layer_flops` (sharded by TP/CP/Ulysses/EP); memory-bound kernels
from :mod:`simulator.program.memops`. Attention: ``flash`` (TE), ``flash2`` and ``sdpa`` are one fused kernel
whose FLOPs count the causal half and, in backward, the recomputation of Q K^T inside the kernel (backward = 2.5x
the forward FLOPs); ``unfused`` runs the score GEMMs over the full s x s matrix (the mask is applied afterwards)
plus softmax and dropout as memory-bound ops. Every dtype is decided here (:func:`linear_dtype`,
:func:`attention_dtype`) and recorded on the op.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from simulator.model import (
    GemmOp,
    ModelSpec,
    ParamTensor,
    RankShape,
    embedding_params,
    expert_mlp_ops,
    head_params,
    layer_flops,
    layer_params,
    local_numel,
    logits_flops,
)
from simulator.plan import ResolvedPlan
from simulator.program.memops import (
    LayerShape,
    eager_chain_memops,
    eager_memops,
    embedding_memops,
    head_memops,
    layer_memops,
)
from simulator.program.op_chains import FUSED_CROSS_ENTROPY, FUSED_PERMUTE, PermuteChain
from simulator.program.ops import AttentionOp, Gemm, GemmKernel, LayerProgram, MemOp
from simulator.traffic import CommOp, layer_traffic

#: the phases a training micro-batch runs (forward and backward); an inference phase runs ("fwd",)
TRAINING = frozenset({"fwd", "bwd"})


def quantized(dtype: str) -> bool:
    """An fp8 or fp4 (NVFP4, MXFP4) GEMM or weight dtype: the linear layers quantize their operands, the rest stays
    16-bit."""
    return dtype.startswith(("fp8", "fp4", "mxfp4", "nvfp4"))


def attention_dtype(dtype: str) -> str:
    """Attention runs in 16 bits under fp8 and fp4 recipes (Transformer Engine keeps the softmax and both attention
    GEMMs in bf16; DeepSeek-V3 report Sec. 3.3 likewise; NVFP4 training, arXiv:2509.25149, quantizes the linear
    layers only)."""
    return "bf16" if quantized(dtype) else dtype


def linear_dtype(name: str, dtype: str) -> str:
    """The dtype of a linear GEMM: fp8/fp4 recipes keep the MoE router and the output layer in bf16 (Megatron-Core /
    Transformer Engine: low precision covers the transformer layers' linear layers; the router's logits stay
    16-bit)."""
    if quantized(dtype) and name.split(".")[0] in ("router", "output_layer"):
        return "bf16"
    return dtype


def _kernel(name: str, sequential_experts: bool) -> GemmKernel:
    if not name.startswith("experts."):
        return "dense"
    return "sequential_expert" if sequential_experts else "grouped_expert"


def linear_gemms(ops: Iterable[GemmOp], dtype: str, sequential_experts: bool = False) -> tuple[Gemm, ...]:
    """The program's GEMMs of model GEMM shapes, each in its :func:`linear_dtype` and kernel class (routed experts:
    one grouped GEMM, or one dense GEMM each with ``sequential_experts``)."""
    return tuple(Gemm(o.name, o.phase, o.m, o.k, o.n, o.batch, o.density, linear_dtype(o.name, dtype),
                      _kernel(o.name, sequential_experts)) for o in ops)


def fp8_cast_memops(linear: Iterable[GemmOp | Gemm], cast_bytes: tuple[float, float]) -> list[MemOp]:
    """Quantization of an fp8 recipe, per micro-batch: each fp8 linear layer casts its input X[m, k] in forward
    and its output gradient dY[m, n] in backward, with the fp8 transposes the dgrad and wgrad GEMMs read:
    ``cast_bytes`` = extra bytes per element of (X, dY) (``Recipe.fp8_cast_bytes``: fused or separate kernels).
    Weights are cast once per step (Megatron passes ``is_first_microbatch``), not counted per micro-batch."""
    x_bytes, dy_bytes = cast_bytes
    ops = []
    for o in linear:
        if o.phase != "fwd" or linear_dtype(o.name, "fp8") != "fp8":
            continue
        ops.append(MemOp(f"{o.name}.fp8_cast_input", "fwd", x_bytes * o.m * o.k * o.batch))
        ops.append(MemOp(f"{o.name}.fp8_cast_grad", "bwd", dy_bytes * o.m * o.n * o.batch))
    return ops


def rank_numel(params: list[ParamTensor], sh: RankShape) -> float:
    """Elements of ``params`` this rank holds after TP / EP sharding."""
    return sum(local_numel(t, tp=sh.tp, kv_ranks=sh.kv_ranks, ep=sh.ep, etp=sh.etp) for t in params)


def parameter_pass_memops(params: list[ParamTensor], sh: RankShape, grad_accum_bytes: float,
                          fsdp_copy_bytes: tuple[float, float]) -> list[MemOp]:
    """Passes over this rank's share of ``params`` each micro-batch, in bytes per parameter: a separate
    gradient-accumulation pass after the backward (``Recipe.grad_accum_bytes``; none when the weight-gradient GEMM
    accumulates itself) and FSDP2's copies around its collectives (``Recipe.fsdp_copy_bytes``: forward,
    backward; :mod:`simulator.plan.recipe`)."""
    fwd_copy, bwd_copy = fsdp_copy_bytes
    if not (grad_accum_bytes or fwd_copy or bwd_copy):
        return []
    numel = rank_numel(params, sh)
    ops = [MemOp("grad_accumulation", "bwd", grad_accum_bytes * numel)] if grad_accum_bytes else []
    if fwd_copy or bwd_copy:
        ops += [MemOp("fsdp_copies", "fwd", fwd_copy * numel), MemOp("fsdp_copies", "bwd", bwd_copy * numel)]
    return ops


def layer_comm(traffic: Iterable[CommOp], moe: bool) -> tuple[CommOp, ...]:
    """The per-layer collectives of ``traffic`` (:func:`simulator.traffic.layer_traffic`) a dense or MoE layer
    issues (``CommOp.layer`` ``any`` or its kind)."""
    kind = "moe" if moe else "dense"
    return tuple(o for o in traffic if o.layer in ("any", kind))


def _attention(model: ModelSpec, sh: RankShape, core: list[GemmOp], attention: str, dtype: str) -> AttentionOp:
    adtype = attention_dtype(dtype)
    fused = attention != "unfused"
    return AttentionOp(fwd_flops=sum(o.flops for o in core if o.phase == "fwd"),
                       bwd_flops=sum(o.flops for o in core if o.phase != "fwd"), kernel=attention,
                       seq_len=sh.seq_len / sh.cp, dhead=model.dhead, dtype=adtype,
                       gemms=() if fused else tuple(Gemm(o.name, o.phase, o.m, o.k, o.n, o.batch, o.density, adtype)
                                                    for o in core))


def _phases(program_ops, phases: frozenset[str]):
    """Ops of ``phases`` only (every backward phase counts as ``bwd``)."""
    return tuple(o for o in program_ops if ("fwd" if o.phase == "fwd" else "bwd") in phases)


def layer_program(model: ModelSpec, sh: RankShape, dtype: str, *, layer_index: int, attention: str = "flash",
                  eager: bool = False, amp: bool = False, fp8_cast_bytes: tuple[float, float] = (0.0, 0.0),
                  grad_accum_bytes: float = 0.0, permute: PermuteChain = FUSED_PERMUTE,
                  sequential_experts: bool = False, sort_chunks: bool = False,
                  fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0), comm: Iterable[CommOp] = (),
                  phases: frozenset[str] = TRAINING) -> LayerProgram:
    """The program of layer ``layer_index`` for one micro-batch on a rank whose share of the layer is ``sh``.

    ``dtype``: the recipe's GEMM dtype on this GPU; ``attention``: the core-attention kernel; ``eager``: plain
    PyTorch modules (layout copies around attention); ``amp``: torch.autocast over fp32 weights (fp32 residual
    stream, casts; :func:`simulator.program.memops.eager_memops`). With an fp8 / fp4 ``dtype`` the linear layers
    run quantized and cast their input (forward) and output gradient (backward) at ``fp8_cast_bytes`` extra bytes
    per element (:func:`fp8_cast_memops`); attention, the router and the output layer stay 16-bit.
    ``grad_accum_bytes`` / ``fsdp_copy_bytes``: :func:`parameter_pass_memops`; ``permute``: the MoE permute +
    unpermute chain (``moe.permute``); ``sequential_experts``: the routed experts run one dense GEMM each
    (Megatron's SequentialMLP); ``sort_chunks``: the all-to-all dispatcher reorders the received rows by local
    expert and back; ``comm``: the plan's per-layer traffic (filtered to this layer's kind, :func:`layer_comm`);
    ``phases``: the phases kept (training: forward and backward).
    """
    flash = attention in ("flash", "flash2", "sdpa")
    kernel = attention if flash else "unfused"
    # every fused kernel recomputes Q K^T in its backward, and their measured rates count it
    lf = layer_flops(model, sh, layer_index=layer_index, causal=flash, attention="flash" if flash else attention)
    linear = [o for o in lf.ops if not o.name.startswith("attn.")]
    core = [o for o in lf.ops if o.name.startswith("attn.")]
    moe = model.is_moe_layer(layer_index)
    shape = LayerShape(tokens=sh.tokens, norm_tokens=sh.norm_tokens, scores=sh.q_rows * sh.heads * sh.seq_len,
                       ffn_local=0.0 if moe else sh.ffn, qk_width=(sh.heads + sh.kv_heads) * model.dhead,
                       expert_ffn_local=model.moe.expert_ffn_hidden / sh.etp if moe else 0.0)
    mem = layer_memops(model, shape, unfused_attention=not flash, moe_routed_tokens=sh.routed_rows if moe else 0.0,
                       permute=permute, sequential_experts=sh.local_experts if moe and sequential_experts else 0.0,
                       sort_chunks=moe and sort_chunks, local_experts=sh.local_experts if moe else 0.0)
    params = layer_params(model, layer_index)
    if eager:
        mem = eager_chain_memops(model, shape, mem, amp=amp) + eager_memops(model, shape, rank_numel(params, sh), amp=amp)
    if quantized(dtype):
        mem += fp8_cast_memops(linear, fp8_cast_bytes)
    mem += parameter_pass_memops(params, sh, grad_accum_bytes, fsdp_copy_bytes)
    attn = _attention(model, sh, core, kernel, dtype)
    training = phases == TRAINING
    if not training:
        attn = AttentionOp(attn.fwd_flops, 0.0, attn.kernel, attn.seq_len, attn.dhead, attn.dtype,
                           _phases(attn.gemms, phases))
    return LayerProgram(kind="moe" if moe else "dense",
                        gemms=_phases(linear_gemms(linear, dtype, sequential_experts), phases),
                        memops=_phases(mem, phases), attention=attn, comm=layer_comm(comm, moe),
                        fwd_flops=lf.forward_flops if "fwd" in phases else 0.0,
                        bwd_flops=lf.backward_flops + lf.recompute_flops if "bwd" in phases else 0.0,
                        local_experts=sh.local_experts if moe else 0.0, host_issue=True)


def plan_layer_program(rp: ResolvedPlan, dtype: str, *, layer_index: int, permute: PermuteChain = FUSED_PERMUTE,
                       sequential_experts: bool = False, sort_chunks: bool = False,
                       phases: frozenset[str] = TRAINING) -> LayerProgram:
    """:func:`layer_program` of a resolved plan: its rank shape, the recipe's attention kernel, eager / amp
    modules, fp8 cast bytes, gradient-accumulation and FSDP copy bytes, and the per-layer collectives of its
    traffic (:func:`simulator.traffic.layer_traffic`). ``dtype``: the recipe's GEMM dtype on the GPU
    (``Recipe.gemm_dtype_on``); ``permute``, ``sequential_experts``, ``sort_chunks``: the MoE implementation."""
    r = rp.recipe
    return layer_program(rp.model, rp.shape, dtype, layer_index=layer_index, attention=r.attention, eager=r.eager,
                         amp=r.amp_casts, fp8_cast_bytes=r.fp8_cast_bytes, grad_accum_bytes=r.grad_accum_bytes,
                         permute=permute, sequential_experts=sequential_experts, sort_chunks=sort_chunks,
                         fsdp_copy_bytes=r.fsdp_copy_bytes, comm=layer_traffic(rp), phases=phases)


def head_program(model: ModelSpec, sh: RankShape, dtype: str, grad_accum_bytes: float = 0.0,
                 embedding_copy: bool = False, cross_entropy: tuple[float, float] = FUSED_CROSS_ENTROPY,
                 fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerProgram:
    """Final norm, output-layer GEMMs (tokens x h x v/tp over the vocabulary the weights hold, ``RankShape.vocab_tp``;
    kept in bf16 under fp8 / fp4) and cross entropy of the
    last stage, one micro-batch; ``grad_accum_bytes`` / ``fsdp_copy_bytes`` as :func:`layer_program`, over the
    head's parameters and, with ``embedding_copy`` (tied embeddings or MTP modules split over pipeline stages),
    the last stage's copy of the word embedding; ``cross_entropy``: bytes per logit forward and backward
    (``Recipe.cross_entropy``, :data:`simulator.program.op_chains.CROSS_ENTROPY_BYTES`)."""
    lf = logits_flops(model, sh)
    mem = head_memops(model, sh.tokens, sh.norm_tokens, sh.vocab_tp, cross_entropy)
    params = head_params(model) + (embedding_params(model)[:1] if embedding_copy else [])
    mem += parameter_pass_memops(params, sh, grad_accum_bytes, fsdp_copy_bytes)
    return LayerProgram(kind="head", gemms=linear_gemms(lf.ops, dtype), memops=tuple(mem),
                        fwd_flops=lf.forward_flops, bwd_flops=lf.backward_flops)


def embedding_program(model: ModelSpec, sh: RankShape, grad_accum_bytes: float = 0.0,
                      fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerProgram:
    """Embedding lookup and its gradient on the first stage, one micro-batch (memory-bound only); parameter passes
    as :func:`layer_program`."""
    mem = embedding_memops(model, sh.tokens)
    mem += parameter_pass_memops(embedding_params(model), sh, grad_accum_bytes, fsdp_copy_bytes)
    return LayerProgram(kind="embedding", memops=tuple(mem))


def expert_ffn_program(model: ModelSpec, dtype: str, rows_per_expert, etp: int = 1) -> LayerProgram:
    """One rank's routed-expert GEMMs when its local experts multiply ``rows_per_expert`` tokens each (one entry
    per local expert; padding included), as grouped GEMMs: one batched GEMM per distinct row count (experts with
    equal rows share a launch), so equal rows give exactly the shapes of :func:`layer_program`'s expected load."""
    rows, counts = np.unique(np.asarray(rows_per_expert, dtype=float), return_counts=True)
    ops = [o for r, n in zip(rows, counts, strict=True) if r > 0
           for o in expert_mlp_ops(model, float(r), etp, batch=int(n))]
    return LayerProgram(kind="experts", gemms=tuple(Gemm(o.name, o.phase, o.m, o.k, o.n, o.batch, o.density, dtype,
                                                         "grouped_expert") for o in ops))
