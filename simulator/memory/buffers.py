"""Memory outside the per-layer activations and model states: first/last-stage activations, logits, framework
and communication buffers, and transient buffers that raise only the peak.

Sources: Korthikanti et al. 2023 Sec. 4.3 (embedding dropout mask s*b*h*p/t on the first stage; final layernorm
and output-layer input 2*s*b*h/t each, and fp32 logits 4*s*b*v/t for the cross entropy on the last stage);
PyTorch DDP gradient buckets (a second copy of the gradients, ``bucket_cap_mb`` buckets covering all of them);
FSDP/ZeRO-3 prefetch (the current and the next layer gathered); Megatron MoE all-to-all dispatch buffers; PyTorch
autocast's bf16 copies of fp32 weights (torch.autocast casts each weight once per forward and the matmul saves the
copy for backward: 2 B/param alive from forward to backward; measured on H200, tests/validation/test_pytorch_h200.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simulator.memory.activations import MASK_BYTES, ActContext, cached_layer_bytes
from simulator.memory.items import MemoryItem
from simulator.model.spec import moe_flags_of
from simulator.plan.recipe import FP32, Recipe

if TYPE_CHECKING:
    from simulator.plan.params import StageParams
    from simulator.plan.resolved import ResolvedPlan

GATHERED_LAYERS = 2
"""ZeRO-3 / FSDP keep the layer in compute and the prefetched next one gathered (FSDP2 default prefetch)."""


def stage_extra_activations(rp: ResolvedPlan, c: ActContext, stage: int, flight: float) -> list[MemoryItem]:
    """Embedding dropout mask on the first stage; final norm and output-layer inputs on the last stage (the ranks
    that run them: :meth:`~simulator.plan.resolved.ResolvedPlan.holds_stage`)."""
    m, by, items = rp.model, c.dtype_bytes, []
    if rp.holds_stage(stage, first=True) and m.dropout > 0:
        items.append(MemoryItem("activations", "embedding.dropout_mask", MASK_BYTES * c.rep * m.hidden * flight,
                                f"{MASK_BYTES}*r*h x {flight:g} in flight", scaling="in_flight"))
    items += _stage_outputs(rp, c, stage, flight)
    if rp.holds_stage(stage, first=False):
        out_in = c.tokens if c.pytorch_layout else c.rep
        items.append(MemoryItem("activations", "final_norm.input", by * c.rep * m.hidden, f"{by}*r*h x 1 in flight",
                                scaling="micro_batch"))
        items.append(MemoryItem("activations", "output_layer.input", by * out_in * m.hidden,
                                f"{by}*r*h x 1 in flight", scaling="micro_batch"))
    return items


def _stage_outputs(rp: ResolvedPlan, c: ActContext, stage: int, flight: float) -> list[MemoryItem]:
    """Without ``parallel.deallocate_pipeline_outputs`` (Megatron ``deallocate_output_tensor`` off) each model-chunk
    forward in flight keeps its output (s/cp x b x h, /t with sp, in the activation dtype) until its backward:
    flight x vpp chunk forwards (:meth:`Schedule.in_flight` counts them per stage); on the rank that runs the loss
    the final chunk's output is the loss, so one fewer with vpp > 1 (at the peak, after Megatron's warm-up of
    (vpp - 1) pp non-final chunk forwards, one final chunk is alive) and none without interleaving."""
    p = rp.parallel
    if p.deallocate_pipeline_outputs or p.pp == 1:
        return []
    chunks, scaling = flight * p.vpp, "in_flight"
    if rp.holds_stage(stage, first=False):
        chunks, scaling = max(chunks - 1, 0) if p.vpp > 1 else 0, None
    if not chunks:
        return []
    b = c.dtype_bytes * c.rep * rp.model.hidden
    return [MemoryItem("activations", "pipeline.stage_outputs", b * chunks,
                       f"{c.dtype_bytes}*r*h x {chunks:g} chunk outputs kept (deallocate_pipeline_outputs false)",
                       scaling=scaling)]


def _logit_items(rp: ResolvedPlan, c: ActContext) -> list[MemoryItem]:
    """The loss: fp32 logits for the softmax, 16-bit logits before the cast; with plain PyTorch
    (``F.cross_entropy(logits.float(), ...)``) backward also holds, at its start and with every activation still
    alive, the fp32 gradients of the log-softmax output and of the fp32 logits (14n B with the loop's 16-bit
    logits, n = tokens x vocabulary; the 16-bit gradient of the logits is cast from the last fp32 one after the
    other two fp32 buffers died: 8n, never the peak) (Megatron's fused vocab-parallel cross entropy works in place). Megatron's unfused cross entropy
    (``training.cross_entropy: unfused``, core_v0.6 tensor_parallel/cross_entropy.py) subtracts the row maximum
    out of place: ``logits.float()`` and the shifted fp32 copy are alive together until the loss returns."""
    v = c.shape.vocab_tp        # the vocabulary the output layer holds (padded), per TP rank
    n = c.tokens * v * (1 + rp.model.mtp_layers)  # each MTP module keeps its own loss's softmax
    heads = f" x {1 + rp.model.mtp_layers} (main + MTP losses)" if rp.model.mtp_layers else ""
    if rp.recipe.loss_implementation == "hf_fp32":
        return _hf_loss_items(n, heads)
    items = [MemoryItem("other", "logits.fp32", FP32 * n,
                        f"4*T*v/t = 4*{c.tokens:g}*{v:g}{heads}  [fp32 softmax for the loss]",
                        scaling="micro_batch"),
             MemoryItem("transient", "logits.16bit", c.dtype_bytes * n,
                        f"{c.dtype_bytes}*T*v/t  [16-bit logits before the fp32 cast]", scaling="micro_batch")]
    if rp.recipe.cross_entropy == "unfused" and not c.pytorch_layout:
        items.append(MemoryItem("transient", "loss.fp32_cast", FP32 * n,
                                "4*T*v/t  [logits.float(), alive beside the shifted fp32 logits]",
                                scaling="micro_batch"))
    if c.pytorch_layout:   # the 16-bit gradient of the logits comes after the fp32 buffers but one are freed
        items.append(MemoryItem("transient", "loss.grad_fp32", 2 * FP32 * n,
                                "2 x 4*T*v/t  [fp32 gradients of log-softmax output and of the fp32 logits]",
                                scaling="micro_batch"))
    return items


def _hf_loss_items(n: float, heads: str) -> list[MemoryItem]:
    """Hugging Face ``ForCausalLMLoss`` (transformers src/transformers/loss/loss_utils.py at 0114da07): ``logits =
    logits.float()`` then ``F.cross_entropy`` = log_softmax + nll_loss over n = tokens x vocabulary entries.
    Forward, at the loss: 16-bit logits (2n), their fp32 copy (4n) and the fp32 log-softmax output (4n), 10n B.
    The 16-bit logits die with the model output (``loss = model(...).loss``) and the fp32 copy with the loss
    function's frame; the log-softmax output is saved for backward. Backward, at the loss: nll_loss_backward
    allocates the fp32 gradient of the log-softmax output (zeros, then a scatter: 4n) and log_softmax_backward
    writes the fp32 gradient of the logits (4n) while its saved output is alive: 12n B, the loss's peak; then the
    two inputs die and the cast back (ToCopyBackward) holds 4n + 2n."""
    return [MemoryItem("other", "logits.fp32", FP32 * n,
                       f"4*T*v/t{heads}  [fp32 log-softmax output, saved for nll_loss's backward]",
                       scaling="micro_batch"),
            MemoryItem("transient", "loss.grad_fp32", 2 * FP32 * n,
                       f"2 x 4*T*v/t{heads}  [nll_loss's fp32 gradient of the log-softmax output and "
                       "log_softmax_backward's fp32 gradient of the logits]", scaling="micro_batch")]


def _moe_items(rp: ResolvedPlan, c: ActContext) -> list[MemoryItem]:
    moe = rp.model.moe
    routed = c.shape.routed_rows * (moe.capacity_factor or 1.0)
    b = 2 * c.dtype_bytes * routed * rp.model.hidden
    return [MemoryItem("other", "moe.dispatch_buffers", b, "2 x 2 B x R x h  [all-to-all send and receive of the "
                       "permuted tokens of one layer]", scaling="micro_batch")]


def _sharding_items(replicas: int, rb: Recipe, sp: StageParams) -> list[MemoryItem]:
    """``replicas``: the dense weights' data-parallel replicas dp x cp x ulysses (``dense_shard_degree``)."""
    items = []
    if rb.bucket and replicas > 1:  # a single replica runs without DDP (measured 16.0 B/param, docs/memory.md)
        n = sp.dense + sp.expert
        items.append(MemoryItem("other", "ddp.gradient_buckets", n * rb.bucket,
                                f"{n:.4g} params x {rb.bucket:g} B  [PyTorch DDP gradient buckets]",
                                scaling="fixed"))
    if rb.stage >= 3:
        cb = rb.weight_compute
        items.append(MemoryItem("transient", "zero3.gathered_layers", GATHERED_LAYERS * sp.largest_layer * cb,
                                f"{GATHERED_LAYERS} layers x {sp.largest_layer:.4g} params x {cb} B  [gathered]",
                                scaling="fixed"))
    if rb.stage >= 2:
        items.append(MemoryItem("transient", "zero2.unsharded_layer_grads", sp.largest_layer * rb.grad,
                                f"{sp.largest_layer:.4g} params x {rb.grad:g} B  [one layer before reduce-scatter]",
                                scaling="fixed"))
    return items


def _autocast_items(rb: Recipe, sp: StageParams) -> list[MemoryItem]:
    if not (rb.amp_casts and rb.stage < 3):
        return []
    n = sp.dense + sp.expert
    return [MemoryItem("activations", "autocast.bf16_weights", 2 * n,
                       f"2 B x {n:.4g} params  [autocast's bf16 weight copies, saved for backward]",
                       scaling="fixed")]


def fixed_buffer_items(replicas: int, rb: Recipe, sp: StageParams) -> list[MemoryItem]:
    """The items of :func:`buffer_items` that do not depend on the micro-batch (``scaling: fixed``), in its order
    (``replicas``: dp x cp x ulysses, what they read of the plan)."""
    return _sharding_items(replicas, rb, sp) + _autocast_items(rb, sp)


def buffer_items(rp: ResolvedPlan, c: ActContext, rb: Recipe, sp: StageParams, stage: int) -> list[MemoryItem]:
    """Logits (last stage), DDP buckets, MoE dispatch buffers, and transients (ZeRO-3 gathered layers, one layer of
    unsharded gradients, the layer recomputed in backward under full recompute, CP all-gathered K/V)."""
    m, p = rp.model, rp.parallel
    items = _sharding_items(rp.dp * p.cp * p.ulysses, rb, sp)
    if rp.holds_stage(stage, first=False):
        items += _logit_items(rp, c)
    layers = rp.stage_layers[stage]
    has_moe = m.moe is not None and any(moe_flags_of(m, layers))
    if has_moe:
        items += _moe_items(rp, c)
    if p.recompute != "none" and layers:
        kept = replace(c, recompute="none")
        b = cached_layer_bytes(m, kept, has_moe)
        if p.recompute == "selective":
            b -= cached_layer_bytes(m, c, has_moe)
        if b > 0:
            items.append(MemoryItem("transient", "recompute.layer", b,
                                    f"one layer's activations rebuilt in backward ({p.recompute} recompute)",
                                    scaling="micro_batch"))
    items += _autocast_items(rb, sp)
    if p.cp > 1 and p.cp_comm == "all_gather":
        kv = c.shape.kv_heads_tp
        b = 2 * c.dtype_bytes * c.shape.micro_batch * rp.training.seq_len * kv * m.dhead
        items.append(MemoryItem("transient", "cp.gathered_kv", b, "2 x 2 B x b*s*kv_heads/t*d_head  [all-gathered K, V]",
                                scaling="micro_batch"))
    return items
