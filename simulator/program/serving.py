"""The program of a serving step (a prefill chunk or a decode step, forward only) for a
:class:`~simulator.plan.Batch` under a resolved plan: per layer, the output head and the embedding, priced by
:func:`simulator.pricing.serving.price_serving` (docs/serving/step_model.md).

A serving layer differs from a training layer's forward (:func:`simulator.program.layer_program`) in what the
engines run, not in how an op is priced:

- q/k/v run as one fused GEMM (vLLM's ``QKVParallelLinear``); the router and the output layer stay bf16 under
  fp8 / fp4 recipes (:func:`simulator.program.linear_dtype`, as training: vLLM's unquantized ``GateLinear`` and
  ``ParallelLMHead``); with weight-only kernels (``weight_dtype`` != ``dtype``) each linear GEMM reads its weights
  in the checkpoint's dtype;
- routed experts: the touched experts (:func:`touched_experts`) share the routed rows, one grouped GEMM at the
  serving expert kernel's efficiency and the routing's imbalance (``Gemm.slowdown``);
- the attention core is a :class:`~simulator.program.ops.CacheAttentionOp` over the K/V cache;
- memory-bound ops are the engine's kernel set (``MemOp.kernel`` ``kernel_set``: bytes only; the set's small
  kernels beyond the 4 GEMMs and attention are ``LayerProgram.launches``), with the kernel set's extra bytes
  (unfused RoPE and SwiGLU) and the K/V cache's traffic by its implementation (``serving.kv_cache_impl``: a paged
  write of the new slots, HF DynamicCache's whole-cache concatenation, HF StaticCache's ``repeat_kv`` expansion);
- its collectives are :func:`simulator.traffic.serving_layer_traffic`.

The engine's choices arrive as the serving registries' objects (:mod:`simulator.serving.backends`: a kernel set, a
decode attention kernel, an expert kernel), read by attribute.
"""

from __future__ import annotations

from simulator.model import ModelSpec, expert_mlp_ops, layer_flops
from simulator.plan import Batch, ResolvedPlan
from simulator.program.build import layer_comm, linear_dtype
from simulator.program.memops import LayerShape, eager_memops, embedding_memops, layer_memops
from simulator.program.ops import CacheAttentionOp, Gemm, LayerProgram, MemOp
from simulator.traffic import serving_layer_traffic

#: GEMMs and the attention kernel of a layer, launched apart from the kernel set's small kernels
_BIG_KERNELS = 5


def touched_experts(model: ModelSpec, ep: int, tokens_per_rank: float, redundant: int = 0) -> float:
    """Expected local experts that receive at least one token: ``E_local (1 - (1 - k/E)^(tokens x ep))``, where
    ``tokens_per_rank`` x ep are the distinct tokens the expert group routes; with EPLB's
    ``redundant`` replicas the rank holds ``(E + R) / ep`` slots, each hit by a token's selection with about
    ``k / (E + R)``."""
    moe = model.moe
    slots = moe.experts + redundant
    return slots / ep * (1.0 - (1.0 - moe.top_k / slots) ** (tokens_per_rank * ep))


def checkpoint_dtypes(rp: ResolvedPlan, dtype: str, weights: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """(compute, weight) dtypes of the GEMMs outside the experts and of the experts' GEMMs. Without
    ``model.weight_quantization`` both are the plan's; with it the experts read their weights in the checkpoint's
    format (a weight-only kernel where the compute dtype differs: W4A16 MXFP4 on Hopper), and with ``modules:
    experts`` the other linear layers are bf16 GEMMs of bf16 weights (gpt-oss: vLLM's mxfp4.py quantizes only
    FusedMoE layers; simulator/model/quantization.py)."""
    q = rp.model.weight_quantization
    if q is None:
        return (dtype, weights), (dtype, weights)
    dense = ("bf16", "bf16") if q.modules == "experts" else (dtype, q.format)
    return dense, (dtype, q.format)


def _linear(ops, dtype: str, weights: str) -> list[Gemm]:
    out = []
    for o in ops:
        d = linear_dtype(o.name, dtype)
        w = linear_dtype(o.name, weights)
        out.append(Gemm(o.name, "fwd", o.m, o.k, o.n, o.batch, o.density, d, weight_dtype="" if w == d else w))
    return out


def _dense_gemms(model: ModelSpec, sh, layer_index: int, dtype: str, weights: str) -> list[Gemm]:
    """Forward GEMMs of one layer without attention core and routed experts; q/k/v fused into one GEMM."""
    ops = [o for o in layer_flops(model, sh, layer_index=layer_index).ops
           if o.phase == "fwd" and not o.name.startswith(("attn.", "experts."))]
    qkv = [o for o in ops if o.name in ("q_proj", "k_proj", "v_proj")]
    if len(qkv) == 3:
        fused = type(qkv[0])("qkv_proj", "fwd", qkv[0].m, qkv[0].k, sum(o.n for o in qkv), 1)
        ops = [fused] + [o for o in ops if o not in qkv]
    return _linear(ops, dtype, weights)


def _expert_gemms(rp: ResolvedPlan, sh, dtype: str, weights: str, expert_kernel, imbalance: float) -> list[Gemm]:
    """The touched experts' GEMMs: one grouped GEMM over ``touched`` experts of ``routed rows / touched`` rows."""
    # the expert group's distinct tokens are routed rows x ep / top_k (tokens TP ranks share counted once, expert-TP
    # shards' copies too: simulator/plan/shape.py)
    distinct_per_rank = sh.routed_rows / rp.model.moe.top_k
    touched = max(touched_experts(rp.model, rp.parallel.ep, distinct_per_rank, rp.parallel.redundant_experts), 1e-9)
    rows = sh.routed_rows / touched
    slowdown = imbalance / expert_kernel.relative(rows)
    return [Gemm(g.name, "fwd", g.m, g.k, g.n, g.batch, g.density, g.dtype, "grouped_expert", g.weight_dtype, slowdown)
            for g in _linear([o for o in expert_mlp_ops(rp.model, rows, sh.etp, batch=touched) if o.phase == "fwd"],
                             dtype, weights)]


def _kv_heads_read(rp: ResolvedPlan, batch: Batch, kv_cache) -> float:
    """Query heads per K/V head the attention reads (``repeat_kv``'s copies, 1 without expansion or with MLA)."""
    model, sh = rp.model, rp.shape_of(batch)
    if kv_cache is None or not kv_cache.expands_gqa or model.mla is not None:
        return 1.0
    return sh.heads_tp / sh.kv_heads_tp


def _keys(batch: Batch, kv_cache, cache_len: int) -> int:
    """Keys attention runs over per sequence: cached + new, or the static cache's preallocated length."""
    filled = batch.cached + batch.new
    return max(cache_len, filled) if kv_cache is not None and kv_cache.full_length else filled


def _window(rp: ResolvedPlan, layer_index: int | None, kv_cache) -> int | None:
    """The sliding window the attention of layer ``layer_index`` reads (None: every cached key): the paged engines'
    kernels take the window (vLLM's FlashAttention / FlashInfer ``window_left``, SGLang's and TensorRT-LLM's
    sliding-window kernels); HF's concat and static caches attend over every key under a mask."""
    if layer_index is None or (kv_cache is not None and (kv_cache.concat or kv_cache.full_length)):
        return None
    return rp.model.attention_window(layer_index)


def attended_pairs(past: float, new: float, window: int | None) -> float:
    """Query-key pairs of ``new`` queries after ``past`` cached tokens, causal, each query at position p (1-based)
    attending ``min(p, window)`` keys: ``a x past + a (a + 1) / 2 + (new - a) x window`` with ``a = clamp(window -
    past, 0, new)`` the queries still inside their first window (``new x past + new (new + 1) / 2`` without one)."""
    if window is None:
        return new * past + new * (new + 1) / 2.0
    a = min(max(window - past, 0), new)
    return a * past + a * (a + 1) / 2.0 + (new - a) * window


def cache_attention(rp: ResolvedPlan, batch: Batch, kv_token_bytes: float, decode_kernel, kv_cache=None,
                    cache_len: int = 0, verify: bool = False, layer_index: int | None = None) -> CacheAttentionOp:
    """The attention core of one layer for ``batch``: causal FLOPs ``2 x seqs x new x (past + (new + 1)/2) x width
    x heads per rank`` (width: q.k plus p.v head dims; absorbed MLA decode: the latent + rope key and the latent),
    over the ``seqs x (past + new) x kv_token_bytes`` of cache; ``decode_kernel`` (one new token):
    :class:`simulator.serving.backends.AttentionKernel` (one CTA per sequence and K/V head without split-KV, per
    query head for MLA). ``kv_cache`` (:class:`simulator.serving.backends.KvCacheImpl`, None: paged): a static
    cache attends over ``cache_len`` keys, and an expanded one reads ``heads / kv_heads`` copies (one CTA per query
    head). ``verify``: a speculative-decoding verify step (``new`` = k + 1 draft positions per sequence) runs the
    decode kernel over its ``new`` query rows (vLLM's FlashAttention / FlashMLA decode paths take several query
    tokens per sequence; absorbed MLA as at decode), not the prefill path. ``layer_index``: a sliding-window layer
    (:func:`_window`) computes :func:`attended_pairs` and reads the ``min(past + new, window + new - 1)`` keys its
    queries' windows span."""
    model, sh = rp.model, rp.shape_of(batch)
    seqs, new = batch.sequences, batch.new
    keys, expand = _keys(batch, kv_cache, cache_len), _kv_heads_read(rp, batch, kv_cache)
    window = _window(rp, layer_index, kv_cache)
    pairs = attended_pairs(keys - new, new, window)
    if window is not None:
        keys = min(keys, window + new - 1)
    mla = model.mla
    decoding = new == 1 or verify
    if mla is not None and decoding:
        width = (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
    else:
        width = (mla.qk_head_dim if mla is not None else model.dhead) + model.dhead_v
    flops = 2.0 * seqs * pairs * width * sh.heads_tp
    kv = seqs * keys * kv_token_bytes * expand
    if not decoding or decode_kernel is None:
        return CacheAttentionOp(flops, kv, keys, model.dhead, decode=False)
    cap = float("inf")
    per_query_head = mla is not None or decode_kernel.expanded or decode_kernel.per_query_head
    if not decode_kernel.split_kv:   # one CTA per query head (MLA, masked MHA) or per K/V head
        cap = seqs * (sh.heads_tp if per_query_head else sh.kv_heads_tp * expand) * decode_kernel.per_cta_Bps
    read = decode_kernel.kv_read_efficiency
    if decode_kernel.kv_read_efficiency_8bit is not None and rp.recipe.kv_cache <= 1:
        read = decode_kernel.kv_read_efficiency_8bit
    work = {}
    if decode_kernel.element_rate is not None:   # CTA-bound: each query head's CTA processes its K/V head's keys
        work = dict(elements=seqs * new * keys * sh.heads_tp * (model.dhead + model.dhead_v),
                    element_rate=decode_kernel.element_rate, ctas=seqs * sh.heads_tp, cta_s=decode_kernel.cta_s)
    # a call form that reads K/V for every query head (PyTorch SDPA without enable_gqa), copying it first per call
    call = sh.heads_tp / sh.kv_heads_tp if decode_kernel.expanded and mla is None else 1.0
    copy = (1 + call) * kv if decode_kernel.copy_efficiency is not None and call > 1 else 0.0
    return CacheAttentionOp(flops, kv * call, keys, model.dhead, decode=True,
                            kv_read_efficiency=read, kv_cap_Bps=cap,
                            compute_efficiency=decode_kernel.compute_efficiency, floor_s=decode_kernel.floor_s,
                            copy_bytes=copy, copy_efficiency=decode_kernel.copy_efficiency or 1.0, **work)


def _cache_memops(rp: ResolvedPlan, batch: Batch, kv_token_bytes: float, kv_cache, cache_len: int) -> list[MemOp]:
    """The K/V cache's own traffic: write the new slots (read the projection, write the cache: ``2 x tokens``
    slots), or rebuild the whole cache by concatenation (read past + new, write past + new), plus ``repeat_kv``'s
    expansion of an explicitly masked cache (read ``keys`` slots, write ``heads / kv_heads`` copies)."""
    if kv_cache is not None and kv_cache.concat:
        ops = [MemOp("kv_cache_concat", "fwd", 2 * batch.sequences * (batch.cached + batch.new) * kv_token_bytes)]
    else:
        ops = [MemOp("kv_cache_write", "fwd", 2 * batch.tokens * kv_token_bytes)]
    expand = _kv_heads_read(rp, batch, kv_cache)
    if expand > 1:
        slots = batch.sequences * _keys(batch, kv_cache, cache_len)
        ops.append(MemOp("repeat_kv", "fwd", (1 + expand) * slots * kv_token_bytes))
    return ops


def _memops(rp: ResolvedPlan, batch: Batch, layer_index: int, kv_token_bytes: float, kernels, kv_cache,
            cache_len: int) -> tuple[MemOp, ...]:
    model, sh, tokens = rp.model, rp.shape_of(batch), batch.tokens
    moe = model.is_moe_layer(layer_index)
    shape = LayerShape(tokens=tokens, norm_tokens=tokens, scores=0.0, ffn_local=0.0 if moe else sh.ffn,
                       qk_width=(sh.heads_tp + sh.kv_heads_tp) * model.dhead)
    ops = layer_memops(model, shape, unfused_attention=False, moe_routed_tokens=sh.routed_rows if moe else 0.0)
    cache = _cache_memops(rp, batch, kv_token_bytes, kv_cache, cache_len)
    if kernels.chains is not None:
        ops = _chain_memops(model, shape, kernels.chains, ops, cache, tokens * sh.heads_tp * model.dhead_v)
    else:
        if kernels.eager_layout:
            ops += eager_memops(model, shape, 0.0, amp=False)
        ops += [MemOp("rope_extra", "fwd", tokens * kernels.rope_extra_bytes * shape.qk_width),
                MemOp("swiglu_extra", "fwd", tokens * kernels.swiglu_extra_bytes * shape.ffn_local)] + cache
    return tuple(MemOp(o.name, "fwd", o.bytes, kernel="kernel_set") for o in ops if o.phase == "fwd")


def _chain_memops(model: ModelSpec, shape: LayerShape, ch, ops: list[MemOp], cache: list[MemOp],
                  attn_out: float) -> list[MemOp]:
    """``ops`` with the norms, residual adds, RoPE and SwiGLU at the kernel set's measured copy-equivalent bytes
    (:class:`simulator.serving.backends.EagerChains`), the attention output's layout copy over ``attn_out``
    elements, and the paged cache write (4 B per bf16 K/V element fused) scaled to the measured ``kv_write``."""
    th = shape.norm_tokens * model.hidden
    per = {"norm1": ch.norm * th, "norm2": ch.norm * th, "bias_dropout_add.attn": ch.residual_add * th,
           "bias_dropout_add.mlp": ch.residual_add * th, "rope": ch.rope * shape.tokens * shape.qk_width}
    if model.glu:
        per["activation"] = ch.swiglu * shape.tokens * shape.ffn_local
    out = [MemOp(o.name, o.phase, per[o.name]) if o.phase == "fwd" and o.name in per else o for o in ops]
    out.append(MemOp("attn_out_copy", "fwd", ch.attn_out * attn_out))
    return out + [MemOp(o.name, o.phase, o.bytes * ch.kv_write / 4.0) if o.name == "kv_cache_write" else o
                  for o in cache]


def serving_layer_program(rp: ResolvedPlan, batch: Batch, dtype: str, weights: str, *, layer_index: int,
                          kv_token_bytes: float, kernels, decode_kernel, expert_kernel,
                          imbalance: float = 1.0, kv_cache=None, cache_len: int = 0,
                          verify: bool = False) -> LayerProgram:
    """Layer ``layer_index`` of a serving step of ``batch`` on one rank (module docstring). ``dtype``: the GEMMs'
    compute dtype (``ResolvedPlan.gemm_dtype``); ``weights``: the weights' dtype (``ResolvedPlan.weight_dtype``);
    ``kv_token_bytes``: K/V cache bytes one token adds to the layer on this rank; ``kernels`` / ``decode_kernel``
    / ``expert_kernel``: the engine's kernel set, decode attention kernel and expert kernel
    (:mod:`simulator.serving.backends`); ``imbalance``: the routing's max / mean load over the EP ranks;
    ``kv_cache`` / ``cache_len``: the K/V cache implementation (``KvCacheImpl``, None: paged) and a static cache's
    preallocated tokens per sequence; ``verify``: a speculative verify step (:func:`cache_attention`)."""
    model, sh = rp.model, rp.shape_of(batch)
    moe = model.is_moe_layer(layer_index)
    (dense_dtype, dense_weights), (expert_dtype, expert_weights) = checkpoint_dtypes(rp, dtype, weights)
    gemms = _dense_gemms(model, sh, layer_index, dense_dtype, dense_weights)
    if moe:
        gemms += _expert_gemms(rp, sh, expert_dtype, expert_weights, expert_kernel, imbalance)
    return LayerProgram(kind="moe" if moe else "dense", gemms=tuple(gemms),
                        memops=_memops(rp, batch, layer_index, kv_token_bytes, kernels, kv_cache, cache_len),
                        attention=cache_attention(rp, batch, kv_token_bytes, decode_kernel, kv_cache, cache_len,
                                                  verify, layer_index),
                        comm=layer_comm(serving_layer_traffic(rp, batch), moe),
                        fwd_flops=sum(g.flops for g in gemms), local_experts=sh.local_experts if moe else 0.0,
                        launches=max(kernels.per_layer - _BIG_KERNELS, 0))


def serving_head_program(rp: ResolvedPlan, batch: Batch, dtype: str, weights: str) -> LayerProgram:
    """The last stage's once-per-step work: the LM head on the last token of each sequence (``sequences x h x
    vocab_held / tp``, the vocabulary the weights hold, bf16 under fp8 / fp4 as training's output layer) and the
    final norm and sampler as two launches."""
    m = rp.model
    dtype, weights = checkpoint_dtypes(rp, dtype, weights)[0]
    head = _linear([Gemm("output_layer", "fwd", batch.sequences, m.hidden, rp.shape_of(batch).vocab_tp)],
                   dtype, weights)
    return LayerProgram(kind="head", gemms=tuple(head), fwd_flops=head[0].flops, launches=2)


def serving_embedding_program(rp: ResolvedPlan, batch: Batch) -> LayerProgram:
    """The first stage's embedding lookup of the batch's new tokens (one memory-bound kernel)."""
    return LayerProgram(kind="embedding", memops=tuple(o for o in embedding_memops(rp.model, batch.tokens)
                                                       if o.phase == "fwd"))
