"""Activation bytes of what a submodule's engine stack lacks, item by item as :mod:`simulator.memory.activations`
counts a layer: the cross-attention blocks of a CoCa decoder and the attentional pooler(s) of a CoCa image encoder.

Each item is one tensor kept for the backward, for one micro-batch on one GPU, with its bytes formula; the stage
multiplies by the micro-batches in flight (:func:`simulator.plan.pipeline.in_flight`, the engine's rule) and, for
the cross-attention blocks, by the blocks the stage holds. The accounting choices are the plan's
(:func:`simulator.memory.estimate.activation_context`): 16-bit activations (``by`` bytes), the attention kernel
(flash keeps an fp32 logsumexp per query row and head, unfused the softmax output), Megatron's fused accounting or
plain PyTorch's (which adds the SDPA output and the norms' fp32 statistics), the recompute mode of each layer.

Symbols: b micro-batch, T text tokens (the decoder's), N image tokens a block reads (:attr:`MultimodalSpec.image_kv`)
or the encoder's tokens a pooler reads, h the decoder's width, h_kv the image tokens' width, a heads, t tp, d = h / a,
f the MLP width; r = b T h / t with sequence parallelism, else b T h (the engine's replicated region). Image tokens
are not split by sequence parallelism (assumption: they are replicated on every TP rank, as the engine's input).

Cross-attention block (OpenCLIP ``ResidualAttentionBlock(is_cross_attention=True)``: a norm on the queries, one on
the image tokens, Q from the text stream, K and V from the image tokens, then the output projection; with
``cross_attention_mlp`` a norm and an MLP of the stack's shape):

    by r h (query-norm input) + by r h (Q GEMM input) + by b N h_kv (K and V GEMM input: the normed image tokens,
    one tensor for both) + by b T h / t (Q) + 2 by b N h / t (K, V) + [flash: 4 b T a / t | unfused: by a T N b / t]
    + by b T h / t (output projection input) [+ MLP: by r h + by r h + 2 by b T f / t (GeLU)]

The image tokens themselves (the norm's input) are one tensor every block of the stage reads: counted once per
stage and micro-batch in flight (``cross.image_tokens``, by b N h_kv), not per block. Full recompute keeps only
the layer's checkpointed input, which the engine counts, and the image tokens; selective recompute of the core
attention drops the scores as the engine does.

Attentional pooler (OpenCLIP ``AttentionalPooler``: ``ln_k`` on the encoder's tokens, q learned queries through
``ln_q``, one ``nn.MultiheadAttention(w, kdim=h_v, vdim=h_v)``), per pooler of q queries of width w and a_p heads
over the encoder's N tokens of width h_v:

    by b N h_v (ln_k input: the encoder's output tokens) + by b N h_v (K and V GEMM input) + by q w (Q GEMM input:
    ln_q of the queries, one copy expanded over the batch) + by b q w / t (Q) + 2 by b N w / t (K, V)
    + [flash: 4 b q a_p / t | unfused: by a_p q N b / t] + by b q w / t (output projection input)

The whole pooler sits on the encoder's last stage (as its parameters and FLOPs). The engine's stand-in head on
that stage (final norm and output projection over the N tokens) is kept as the engine counts it.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.memory.activations import LSE_BYTES, MASK_BYTES, ActContext, Item, mlp_core_items
from simulator.memory.estimate import activation_context
from simulator.memory.items import MemoryItem
from simulator.multimodal.spec import MultimodalSpec, PoolerSpec, SubmoduleSpec
from simulator.plan import ResolvedPlan
from simulator.plan.shape import heads_per_rank


def _scores(c: ActContext, rows: float, heads: float, keys: float, prefix: str, dropout: float) -> list[Item]:
    """What the attention keeps besides Q, K, V: the fp32 logsumexp (flash) or the softmax output (unfused, with
    its dropout mask and output when dropout > 0); nothing more when selective recompute re-runs it."""
    by = c.dtype_bytes
    if c.attention == "flash":
        return [(f"{prefix}.lse", LSE_BYTES * rows * heads, f"{LSE_BYTES}*rows*a/t  [flash logsumexp]")]
    if c.recomputed("core_attn"):
        return []
    s2 = rows * heads * keys
    items = [(f"{prefix}.softmax_out", by * s2, f"{by}*a/t*rows*keys  [softmax output]")]
    if dropout > 0:
        items += [(f"{prefix}.softmax_dropout_mask", MASK_BYTES * s2, f"{MASK_BYTES}*a/t*rows*keys  [dropout mask]"),
                  (f"{prefix}.softmax_dropout_out", by * s2, f"{by}*a/t*rows*keys  [dropout output, PV input]")]
    return items


def cross_attention_items(spec: MultimodalSpec, sub: SubmoduleSpec, plan: ResolvedPlan, c: ActContext
                          ) -> list[Item]:
    """(name, bytes, formula) of one cross-attention block for one micro-batch on one GPU (module docstring);
    ``c`` carries the block's recompute mode. Empty under full recompute (the engine's checkpointed layer input
    and the stage's ``cross.image_tokens`` are all that is kept)."""
    if c.recompute == "full":
        return []
    m, by, t = plan.model, c.dtype_bytes, c.shape.tp
    n_img, h_kv = spec.image_kv
    h, rows = sub.hidden, c.tokens                          # b T query rows per rank (no cp in multimodal plans)
    keys_rows = c.shape.micro_batch * n_img                  # b N image rows
    r = c.rep
    items: list[Item] = [("cross.norm_q_in", by * r * h, f"{by}*r*h  [query norm input]")]
    if not c.recomputed("layernorm"):
        q_in = rows if c.pytorch_layout else r
        items += [("cross.q_in", by * q_in * h, f"{by}*r*h  [Q GEMM input]"),
                  ("cross.kv_in", by * keys_rows * h_kv, f"{by}*b*N*h_kv  [K and V GEMM input: normed image tokens]")]
    items += [("cross.q", by * rows * h / t, f"{by}*b*T*h/t  [Q for QK^T]"),
              ("cross.k", by * keys_rows * h / t, f"{by}*b*N*h/t  [K for QK^T]"),
              ("cross.v", by * keys_rows * h / t, f"{by}*b*N*h/t  [V for PV]")]
    if c.pytorch_layout:
        items.append(("cross.sdpa_out", by * rows * h / t, f"{by}*b*T*h/t  [SDPA output]"))
    items += _scores(c, rows, c.shape.heads, n_img, "cross", m.dropout)
    items.append(("cross.proj_in", by * rows * h / t, f"{by}*b*T*h/t  [output projection input]"))
    if m.dropout > 0:
        items.append(("cross.dropout_mask", MASK_BYTES * r * h, f"{MASK_BYTES}*r*h  [dropout mask]"))
    if c.pytorch_layout:
        n = 2 if m.norm == "layernorm" else 1
        items.append(("cross.norm_stats", 4 * n * (r + keys_rows), f"{4 * n}*(b*T + b*N)  [fp32 norm statistics]"))
    if sub.cross_attention_mlp:
        items += [("cross.mlp.norm_in", by * r * h, f"{by}*r*h  [norm input]")]
        if not c.recomputed("layernorm") or c.recomputed("mlp"):
            items.append(("cross.mlp.fc1_in", by * (rows if c.pytorch_layout else r) * h,
                          f"{by}*r*h  [fc1 input]"))
        if not c.recomputed("mlp"):
            items += mlp_core_items(m, c, rows, m.ffn, t, "cross.mlp")
        if m.dropout > 0:
            items.append(("cross.mlp.dropout_mask", MASK_BYTES * r * h, f"{MASK_BYTES}*r*h  [dropout mask]"))
    return items


def pooler_items(pool: PoolerSpec, queries: int, sub: SubmoduleSpec, c: ActContext, dropout: float = 0.0
                 ) -> list[Item]:
    """(name, bytes, formula) of one attentional pooler of ``queries`` queries for one micro-batch on one GPU
    (module docstring). The pooler runs after the encoder's last layer, outside the layers' recompute checkpoints:
    every item is kept whatever the plan's recompute mode."""
    by, t, b = c.dtype_bytes, c.shape.tp, c.shape.micro_batch
    n, hv, w = sub.own_tokens, sub.hidden, pool.width
    tag = f"pooler.q{queries}"
    rows = b * queries
    items: list[Item] = [
        (f"{tag}.norm_k_in", by * b * n * hv, f"{by}*b*N*h_v  [ln_k input: the encoder's output tokens]"),
        (f"{tag}.kv_in", by * b * n * hv, f"{by}*b*N*h_v  [K and V GEMM input]"),
        (f"{tag}.q_in", by * queries * w, f"{by}*q*w  [Q GEMM input: ln_q of the queries, expanded over the batch]"),
        (f"{tag}.q", by * rows * w / t, f"{by}*b*q*w/t  [Q for QK^T]"),
        (f"{tag}.k", by * b * n * w / t, f"{by}*b*N*w/t  [K for QK^T]"),
        (f"{tag}.v", by * b * n * w / t, f"{by}*b*N*w/t  [V for PV]"),
    ]
    if c.pytorch_layout:
        items.append((f"{tag}.sdpa_out", by * rows * w / t, f"{by}*b*q*w/t  [SDPA output]"))
    items += _scores(c, rows, heads_per_rank(pool.heads, t), n, tag, dropout)
    items.append((f"{tag}.proj_in", by * rows * w / t, f"{by}*b*q*w/t  [output projection input]"))
    return items


def cross_blocks_on_stage(sub: SubmoduleSpec, plan: ResolvedPlan, stage: int) -> list[str]:
    """The recompute mode of each cross-attention block on ``stage``: the blocks sit in the last
    ``cross_attention_layers`` layers of the stack (every layer in CoCa's multimodal decoder), each under its
    layer's recompute mode."""
    first = sub.layers - sub.cross_attention_layers
    layers, modes = plan.stage_layers[stage], plan.layer_recompute(stage)
    return [mode for layer, mode in zip(layers, modes, strict=True) if layer >= first]


def submodule_activation_items(spec: MultimodalSpec, sub: SubmoduleSpec, plan: ResolvedPlan
                               ) -> tuple[tuple[MemoryItem, ...], ...]:
    """Per pipeline stage, the activation items the engine lacks (module docstring), each x its blocks x the
    micro-batches in flight: the cross-attention blocks and the image tokens they read on every stage of a
    decoder with cross-attention, the pooler(s) on an encoder's last stage."""
    p = plan.parallel
    ctx = activation_context(plan)
    out = []
    for stage in range(p.pp):
        flight = plan.schedule.in_flight(p.pp, p.vpp, stage, plan.num_microbatches)
        items: list[MemoryItem] = []
        if sub.cross_attention_layers and spec.vision is not None:
            modes = cross_blocks_on_stage(sub, plan, stage)
            n_img, h_kv = spec.image_kv
            if modes:
                by = ctx.dtype_bytes
                items.append(MemoryItem("activations", "cross.image_tokens",
                                        by * ctx.shape.micro_batch * n_img * h_kv * flight,
                                        f"{by}*b*N*h_kv x {flight:g} in flight  [image tokens every block reads]"))
            for mode in dict.fromkeys(modes):
                n = modes.count(mode)
                for name, b, formula in cross_attention_items(spec, sub, plan, replace(ctx, recompute=mode)):
                    items.append(MemoryItem("activations", name, b * n * flight,
                                            f"{formula} x {n} blocks x {flight:g} in flight"))
        pool = sub.attentional_pooler
        if pool is not None and stage == p.pp - 1:
            for q in pool.query_counts:
                for name, b, formula in pooler_items(pool, q, sub, replace(ctx, recompute="none"),
                                                     plan.model.dropout):
                    items.append(MemoryItem("activations", name, b * flight, f"{formula} x {flight:g} in flight"))
        out.append(tuple(items))
    return tuple(out)
