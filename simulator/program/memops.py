"""Memory-bound ops of a transformer layer (norms, activations, softmax, dropout, residual adds, RoPE, MoE
permutation), counted in bytes moved through HBM (:class:`simulator.program.ops.MemOp`; priced at the achievable HBM
bandwidth by :mod:`simulator.pricing.compute`).

Bytes per element follow what each fused kernel reads and writes with 16-bit activations and 1-byte dropout masks
(Korthikanti et al. 2023, Sec. 4.1, the same kernels whose saved tensors give Table 2's 34*s*b*h): a norm reads its
input and writes its output (4 bytes/element) and in backward reads input and output gradient and writes the input
gradient (6); bias-dropout-add reads input and residual and writes output and mask (7; 6 without dropout); GeLU
reads and writes (4; backward 6); SwiGLU reads gate and up and writes one (6 per output element; backward 10);
the fused scale-mask-softmax of unfused attention reads and writes the score matrix (4; backward 6) and attention
dropout adds a read, a write and a mask (5). ALiBi in unfused attention adds 4 per score in the forward: Megatron-
DeepSpeed computes the scores as ``torch.baddbmm(alibi, q, k^T, beta=beta)`` (bigscience-workshop/Megatron-DeepSpeed
megatron/model/transformer.py@affff3d2), which copies the broadcast [b*np, 1, s] bias into the [b*np, s, s] result
(write 2) for the GEMM to read back as C (2); the bias needs no gradient. Flash attention keeps scores on chip (no
entries here; ALiBi is added inside the kernel).

The MoE permute / unpermute and the cross entropy are priced by the framework's implementation in copy-equivalent
bytes (:mod:`simulator.program.op_chains`: the fused kernels' byte counts, or the measured chains of PyTorch ops).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model import ModelSpec
from simulator.program.op_chains import (
    EAGER_CHAINS,
    FUSED_CROSS_ENTROPY,
    FUSED_PERMUTE,
    SEQUENTIAL_ASSEMBLY,
    PermuteChain,
)
from simulator.program.ops import MemOp


@dataclass(frozen=True)
class LayerShape:
    """Per-rank sizes of one layer for one micro-batch (elements)."""

    tokens: float          # tokens this rank projects: b*s/(cp*ulysses)
    norm_tokens: float     # tokens norms/dropouts see: tokens/tp with sequence parallelism
    scores: float          # score-matrix elements of unfused attention: b * heads_local * s/cp * s
    ffn_local: float       # FFN activation width on this rank (dense: ffn/tp)
    qk_width: float        # (local q heads + local k heads) * head dim, for RoPE
    expert_ffn_local: float = 0.0  # routed-expert FFN width on this rank (expert_ffn / etp; 0 for dense layers)


def _score_memops(model: ModelSpec, scores: float) -> list[MemOp]:
    """The unfused attention core's memory-bound kernels over its ``scores`` elements (module docstring)."""
    ops = [MemOp("softmax", "fwd", 4 * scores, True), MemOp("softmax", "bwd", 6 * scores, True)]
    if model.position_embedding == "alibi":   # baddbmm(alibi, q, k^T, beta): the bias expanded into the scores,
        ops.append(MemOp("alibi", "fwd", 4 * scores, True))   # read back by the GEMM as C
    if model.dropout > 0:
        ops += [MemOp("attn_dropout", "fwd", 5 * scores, True), MemOp("attn_dropout", "bwd", 5 * scores, True)]
    return ops


def layer_memops(model: ModelSpec, shape: LayerShape, *, unfused_attention: bool, moe_routed_tokens: float = 0.0,
                 permute: PermuteChain = FUSED_PERMUTE, sequential_experts: float = 0.0, sort_chunks: bool = False,
                 local_experts: float = 0.0) -> list[MemOp]:
    """Memory-bound kernels of one layer, forward and backward (bytes from the module docstring's table).
    ``permute``: the MoE permute + unpermute chain; ``sequential_experts``: the local expert count when experts run
    one by one (SequentialMLP's output assembly), 0 for a grouped GEMM; ``sort_chunks``: the all-to-all
    dispatcher's second reordering of the received rows by local expert and back (Megatron
    ``sort_chunks_by_idxs``: TE's fused kernel or split + cat, both read and write each row once). A chain that
    owns the experts' activation prices it in place of the fused bytes, and one with per-expert weight-gradient
    traffic adds it for ``local_experts`` experts (:class:`simulator.program.op_chains.PermuteChain`)."""
    h, tn, drop = model.hidden, shape.norm_tokens, model.dropout > 0
    bda_f, bda_b = (7.0, 5.0) if drop else (6.0, 4.0)
    act_f, act_b = (6.0, 10.0) if model.glu else (4.0, 6.0)
    ops = [MemOp("norm1", "fwd", 4 * tn * h), MemOp("norm1", "bwd", 6 * tn * h),
           MemOp("norm2", "fwd", 4 * tn * h), MemOp("norm2", "bwd", 6 * tn * h),
           MemOp("bias_dropout_add.attn", "fwd", bda_f * tn * h), MemOp("bias_dropout_add.attn", "bwd", bda_b * tn * h),
           MemOp("bias_dropout_add.mlp", "fwd", bda_f * tn * h), MemOp("bias_dropout_add.mlp", "bwd", bda_b * tn * h)]
    if shape.ffn_local:
        ops += [MemOp("activation", "fwd", act_f * shape.tokens * shape.ffn_local),
                MemOp("activation", "bwd", act_b * shape.tokens * shape.ffn_local)]
    if model.position_embedding == "rope":
        ops += [MemOp("rope", "fwd", 4 * shape.tokens * shape.qk_width),
                MemOp("rope", "bwd", 4 * shape.tokens * shape.qk_width)]
    if unfused_attention:
        ops += _score_memops(model, shape.scores)
    if moe_routed_tokens:
        # permute before the experts and un-permute after, as the framework's chain moves them
        fwd, bwd = permute.bytes(moe_routed_tokens, shape.tokens, h)
        kind = "fused" if permute == FUSED_PERMUTE else "chain"
        ops += [MemOp("moe_permute", "fwd", fwd, kernel=kind), MemOp("moe_permute", "bwd", bwd, kernel=kind)]
        if sort_chunks:
            fwd, bwd = FUSED_PERMUTE.bytes(moe_routed_tokens, shape.tokens, h)
            ops += [MemOp("moe_sort_chunks", "fwd", fwd), MemOp("moe_sort_chunks", "bwd", bwd)]
        if sequential_experts:
            fwd, bwd = SEQUENTIAL_ASSEMBLY.bytes(moe_routed_tokens, h, sequential_experts)
            ops += [MemOp("expert_assembly", "fwd", fwd, kernel="chain"),
                    MemOp("expert_assembly", "bwd", bwd, kernel="chain")]
        rf = moe_routed_tokens * shape.expert_ffn_local
        if rf and permute.owns_activation:   # the framework's own SwiGLU chain over the routed rows
            ops += [MemOp("expert_activation", "fwd", permute.fwd_act * rf, kernel="chain"),
                    MemOp("expert_activation", "bwd", permute.bwd_act * rf, kernel="chain")]
        elif rf:  # the routed experts' activation (SwiGLU / GeLU) over the routed rows
            ops += [MemOp("expert_activation", "fwd", act_f * rf), MemOp("expert_activation", "bwd", act_b * rf)]
        if permute.bwd_expert_param and local_experts:
            params = local_experts * (3 if model.glu else 2) * h * shape.expert_ffn_local
            ops.append(MemOp("expert_weight_grad", "bwd", permute.bwd_expert_param * local_experts * params,
                             kernel="chain"))
        if model.moe is not None and model.moe.shared_ffn:
            act = act_f if model.glu else 4.0
            ops.append(MemOp("shared_activation", "fwd", act * shape.tokens * model.moe.shared_ffn))
    return ops


def head_memops(model: ModelSpec, tokens: float, norm_tokens: float, vocab_local: float,
                cross_entropy: tuple[float, float] = FUSED_CROSS_ENTROPY) -> list[MemOp]:
    """Final norm and the vocab-parallel cross entropy on the last stage, once more per MTP module.
    ``cross_entropy``: (forward, backward) bytes per logit (fused: Megatron upcasts logits to fp32, reading 2 and
    writing 4 bytes per logit forward, reading 4 and writing 2 backward; unfused: the measured op chain,
    :data:`simulator.program.op_chains.CROSS_ENTROPY_BYTES`)."""
    h, norms, heads = model.hidden, 1 + 3 * model.mtp_layers, 1 + model.mtp_layers  # MTP: its head norm, enorm, hnorm
    ce_fwd, ce_bwd = cross_entropy
    kind = "fused" if tuple(cross_entropy) == FUSED_CROSS_ENTROPY else "chain"
    return [MemOp("final_norm", "fwd", norms * 4 * norm_tokens * h), MemOp("final_norm", "bwd", norms * 6 * norm_tokens * h),
            MemOp("cross_entropy", "fwd", heads * ce_fwd * tokens * vocab_local, kernel=kind),
            MemOp("cross_entropy", "bwd", heads * ce_bwd * tokens * vocab_local, kernel=kind)]


def embedding_memops(model: ModelSpec, tokens: float) -> list[MemOp]:
    """Embedding lookup (read rows, write activations) and its gradient scatter-add (read, read, write fp32)."""
    h = model.hidden
    return [MemOp("embedding", "fwd", 4 * tokens * h), MemOp("embedding", "bwd", 10 * tokens * h)]


def eager_memops(model: ModelSpec, shape: LayerShape, layer_params: float, *, amp: bool) -> list[MemOp]:
    """What plain eager PyTorch adds over the fused kernels above, per layer (bytes per T x h element unless said).

    - Attention layout: ``view(b, s, heads, d).transpose(1, 2)`` of Q, K, V before F.scaled_dot_product_attention
      and of its output after are materialised copies (read 2 + write 2 each): 16 forward, 16 backward.
    - ``amp`` (torch.autocast over fp32 parameters): the residual stream is fp32 (the embedding output is), so
      LayerNorm runs in fp32 (+4 each forward, +6 each backward), its output is cast to bf16 for the next matmul
      (+6 each forward; the cast's gradient +6 each backward), the residual adds read fp32 (+4 each forward) and
      accumulate fp32 gradients (+8 each backward): 28 forward, 40 backward; and every weight is cast fp32 -> bf16
      each forward (6 B/param) and its bf16 gradient accumulated into the fp32 .grad in backward (6 B/param).
    The kernels are PyTorch's own (unrolled/vectorized elementwise copy, add, layer_norm in fp32); the byte counts
    follow their reads and writes. Checked against an H200 kernel profile in docs/step_time.md.
    """
    th = shape.tokens * model.hidden
    fwd, bwd = 16.0, 16.0
    ops = []
    if amp:
        fwd, bwd = fwd + 28.0, bwd + 40.0
        ops += [MemOp("eager.weight_cast", "fwd", 6 * layer_params, kernel="eager"),
                MemOp("eager.grad_cast", "bwd", 6 * layer_params, kernel="eager")]
    return ops + [MemOp("eager.layout_and_casts", "fwd", fwd * th, kernel="eager"),
                  MemOp("eager.layout_and_casts", "bwd", bwd * th, kernel="eager")]


def eager_chain_memops(model: ModelSpec, shape: LayerShape, ops: list[MemOp], *, amp: bool = False) -> list[MemOp]:
    """``ops`` (:func:`layer_memops`) with the RMSNorms, RoPE, SwiGLU and residual adds of plain eager PyTorch
    priced as the measured chains of Hugging Face's Llama / Qwen2 layer
    (:data:`simulator.program.op_chains.EAGER_CHAINS`) in place of the fused kernels' bytes; an op is replaced only
    where the model uses that form (RMSNorm, SwiGLU, bf16 residual adds without dropout; RoPE is emitted only for
    rotary models). Norms and residual adds see ``norm_tokens`` (tokens / tp under sequence parallelism), as the
    fused kernels they replace. A model with ``qk_norm`` adds the same RMSNorm chain over q and k (tokens x (q + k
    heads) x head dim): OLMoE's q_norm / k_norm, 112 us each per layer forward in the 4-layer OLMoE trace
    (``h200_traces/olmoe_l4_grouped_mm_mb4_s1024.json.gz``), as the input norm over the same [4, 1024, 2048]."""
    per = {"tokens_hidden": shape.norm_tokens * model.hidden, "tokens_qk": shape.tokens * shape.qk_width,
           "tokens_ffn": shape.tokens * shape.ffn_local}
    skip = set()
    if model.norm != "rmsnorm":
        skip |= {"norm1", "norm2"}
    if not model.glu:
        skip.add("activation")
    if model.dropout > 0 or amp:   # measured in bf16 without dropout; :func:`eager_memops` prices amp's fp32 adds
        skip |= {"bias_dropout_add.attn", "bias_dropout_add.mlp"}
    out = []
    for o in ops:
        chain = EAGER_CHAINS.get(o.name) if o.name not in skip else None
        if chain is None:
            out.append(o)
            continue
        fwd, bwd, unit = chain
        out.append(MemOp(o.name, o.phase, (fwd if o.phase == "fwd" else bwd) * per[unit], o.attention, "chain"))
    if model.qk_norm and model.norm == "rmsnorm":   # q_norm / k_norm: the same eager RMSNorm over q and k
        fwd, bwd, _ = EAGER_CHAINS["norm1"]
        out += [MemOp("norm_qk", "fwd", fwd * per["tokens_qk"], kernel="chain"),
                MemOp("norm_qk", "bwd", bwd * per["tokens_qk"], kernel="chain")]
    return out
