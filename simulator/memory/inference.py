"""Memory per GPU of serving: weights, the KV cache of the sequences in flight, and one forward's transients.

``training.mode: inference`` holds ``micro_batch`` sequences of ``seq_len`` tokens (prompt plus generated) per
replica: the plan's batch; a serving step's memory is that of its own :class:`~simulator.plan.Batch` (b sequences
of ``cached + new`` tokens in the cache, s = cached + new below; the transients of a forward of its new tokens).
Per GPU and pipeline stage (vLLM / TensorRT-LLM accounting):
- weights: the stage's parameters after TP/EP sharding x the parameter bytes of the precision (bf16/fp16 2,
  fp8 1, fp4 0.5625 (NVFP4: 4 bits + an fp8 scale per 16), fp32 4), or the checkpoint's per-module format
  (``model.weight_quantization``: gpt-oss keeps all but its experts in bf16, :func:`weight_bytes`); no gradients,
  master copy or optimizer state;
- KV cache (``other``): 2 (K and V) x layers on the stage x b x s/cp x K/V heads per TP rank
  (``ResolvedPlan.kv_heads_tp``) x head dim x element bytes; K/V heads are replicated when tp > kv_heads. With MLA
  (DeepSeek) the cache holds the compressed latent and the shared rotary key, (kv_lora_rank + qk_rope_head_dim) per
  token and layer, on every TP rank (DeepSeek-V3 technical report, Sec. 2.1.1); with ``window``
  (:class:`~simulator.memory.kv_window.KvWindow`: an engine that frees sliding-window layers' old pages) s is the
  full-equivalent tokens a sequence holds, its windowed layers at most the window's pages;
- transients of one prefill forward: nothing is saved for backward, so only the live tensors of the widest point of
  a layer count: b x new/cp tokens x (2h + ffn/tp, twice with SwiGLU's gate and up) x element bytes (layer input,
  residual and the MLP's up projection); on the last stage the 16-bit logits of each sequence's last token (vLLM
  samples only there).
"""

from __future__ import annotations

from simulator.memory.items import MemoryItem, MemoryReport, StageMemory
from simulator.memory.kv_window import KvWindow
from simulator.memory.runtime import RUNTIME_BYTES
from simulator.plan.params import stage_params
from simulator.plan.resolved import ResolvedPlan
from simulator.plan.shape import Batch


def kv_cache_bytes_per_token_layer(rp: ResolvedPlan) -> float:
    """Bytes of cache one token adds to one layer on one GPU."""
    m = rp.model
    element = rp.recipe.kv_cache
    if m.mla is not None:
        return (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * element
    return 2 * rp.kv_heads_tp * m.dhead * element


def weight_bytes(rp: ResolvedPlan) -> tuple[float, float]:
    """Bytes per weight (outside the experts, of the experts) when serving: the checkpoint's
    ``model.weight_quantization`` (:mod:`simulator.model.quantization`), else the recipe's serving bytes for all."""
    q = rp.model.weight_quantization
    if q is None:
        return rp.recipe.serve_param, rp.recipe.serve_param
    return q.dense_bytes, q.expert_bytes


def inference_memory(rp: ResolvedPlan, hbm_capacity_bytes: float | None = None,
                     batch: Batch | None = None, window: KvWindow | None = None, *,
                     activation_bytes: float | None = None, logit_rows: int | None = None,
                     logit_bytes: float = 0.0) -> MemoryReport:
    """Serving memory of every pipeline stage (module docstring for the accounting) holding ``batch``: its
    sequences' cache of ``cached + new`` tokens each and the transients of a forward of its new tokens (default the
    plan's batch, ``micro_batch`` sequences of ``seq_len`` tokens: a serving scenario's ``batch`` of ``input_len +
    output_len``); ``window``: the engine's rule for sliding-window layers (None: every layer holds every token).
    An engine's start-up profile (``serving.scheduler.profile_forward``): ``activation_bytes`` per element of the
    forward's live tensors (16-bit: the engines keep activations in the model dtype whatever the weights' format)
    and ``logit_rows`` sequences' logits over the whole vocabulary (every TP rank gathers it) at ``logit_bytes``."""
    m, p = rp.model, rp.parallel
    batch = batch or rp.batch
    per_token_layer = kv_cache_bytes_per_token_layer(rp)
    held = batch.context if window is None else window.tokens(batch.context)
    tokens = batch.sequences * held / p.cp
    live = batch.tokens / p.cp
    dense_bytes, expert_bytes = weight_bytes(rp)
    stages = []
    for s in range(p.pp):
        sp = stage_params(rp, s)
        layers = len(rp.stage_layers[s])
        items = [MemoryItem("weights", "weights.dense", sp.dense * dense_bytes,
                            f"{sp.dense:.4g} params x {dense_bytes:g} B (inference)"),
                 MemoryItem("weights", "weights.expert", sp.expert * expert_bytes,
                            f"{sp.expert:.4g} params x {expert_bytes:g} B (inference)"),
                 MemoryItem("other", "kv_cache", layers * tokens * per_token_layer,
                            f"{layers} layers x b*s/cp = {tokens:g} tokens x {per_token_layer:g} B  [K and V cache]")]
        element = rp.recipe.serve_param if activation_bytes is None else activation_bytes
        ffn = (m.moe.expert_ffn_hidden * m.moe.top_k if m.moe is not None else m.ffn) / p.tp
        width = 2 * m.hidden + (2 if m.glu else 1) * ffn
        items.append(MemoryItem("transient", "prefill.live_tensors", live * width * element,
                                f"{live:g} tokens x (2h + ffn/t{' x 2' if m.glu else ''}) x {element} B"))
        if s == p.pp - 1 and logit_rows is not None:
            items.append(MemoryItem("transient", "prefill.logits", logit_rows * rp.vocab_held * logit_bytes,
                                    f"{logit_rows} x v x {logit_bytes:g} B  [start-up sampler run]"))
        elif s == p.pp - 1:
            logits = batch.sequences * rp.vocab_held / p.tp * element
            items.append(MemoryItem("transient", "prefill.logits", logits, f"b * v/t x {element} B  [last-token logits]"))
        stages.append(StageMemory(s, tuple(i for i in items if i.bytes > 0)))
    return MemoryReport(tuple(stages), hbm_capacity_bytes, rp.notes, RUNTIME_BYTES)
