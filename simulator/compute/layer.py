"""Time of one transformer layer (and of the embedding and output head) on one GPU for one micro-batch.

GEMM shapes come from :func:`simulator.model.layer_flops` (sharded by TP/CP/Ulysses/EP), timed by
:func:`simulator.compute.gemm.gemm_times`; memory-bound kernels from :mod:`simulator.compute.memops` at the
achievable HBM bandwidth. Attention: ``flash`` is one fused kernel whose FLOPs (causal half; backward re-computes
Q K^T inside the kernel) run at ``attention_efficiency`` of the tensor peak (``sdpa``, plain PyTorch's
F.scaled_dot_product_attention, at the measured rate of ``ComputeEfficiency.attention_fraction``); ``unfused`` runs the score GEMMs over
the full s x s matrix (the mask is applied afterwards) plus softmax and dropout as memory-bound kernels.

Recompute (Korthikanti et al. 2023, Sec. 5): ``full`` re-runs the whole layer forward inside backward;
``selective`` re-runs the core attention forward (Q K^T, softmax, dropout, P V).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.gemm import gemm_times, peak_flops
from simulator.compute.host import HostIssueCosts
from simulator.compute.memops import (
    LayerShape,
    MemOp,
    eager_memops,
    embedding_memops,
    head_memops,
    layer_memops,
)
from simulator.compute.op_chains import FUSED_CROSS_ENTROPY, FUSED_PERMUTE, PermuteChain
from simulator.hardware import GpuSpec
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


@dataclass(frozen=True)
class LayerTime:
    """Seconds and FLOPs of one layer (or head/embedding) for one micro-batch on one GPU.

    ``fwd_s``/``bwd_s`` are model work (backward includes flash attention's in-kernel recomputation).
    ``attn_fwd_s``/``attn_bwd_s`` the core attention share (the window CP hides its ring steps behind, and what
    selective recompute re-runs); ``wgrad_s``/``dgrad_s`` the backward GEMMs (windows for TP overlap);
    ``fwd_gemm_s`` the forward GEMMs (window for ``tp_comm_overlap``); ``expert_fwd_s``/``expert_bwd_s`` the
    routed-expert GEMMs. FLOPs: ``fwd_flops``/``bwd_flops`` executed, ``attn_fwd_flops`` the core attention's.
    ``host_fwd_s``/``host_bwd_s``: host seconds to issue the layer's kernels eagerly (0 with CUDA graphs;
    :mod:`simulator.compute.host`).
    """

    fwd_s: float
    bwd_s: float
    attn_fwd_s: float = 0.0
    attn_bwd_s: float = 0.0
    wgrad_s: float = 0.0
    dgrad_s: float = 0.0
    fwd_gemm_s: float = 0.0
    expert_fwd_s: float = 0.0
    expert_bwd_s: float = 0.0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    attn_fwd_flops: float = 0.0
    module_fwd: tuple[tuple[str, float, float], ...] = ()
    host_fwd_s: float = 0.0
    host_bwd_s: float = 0.0

    def _modules(self, modules) -> tuple[tuple[str, float, float], ...]:
        chosen = modules or ("core_attn",)
        parts = dict((name, (sec, flops)) for name, sec, flops in self.module_fwd)
        parts.setdefault("core_attn", (self.attn_fwd_s, self.attn_fwd_flops))
        return tuple((name, *parts[name]) for name in chosen if name in parts)

    def recompute_s(self, mode: str, modules: frozenset[str] | None = None) -> float:
        """Seconds re-run in backward: the layer forward (full), the forward of the selectively recomputed
        ``modules`` (default core attention; ``module_fwd``), or 0."""
        if mode == "full":
            return self.fwd_s
        return sum(sec for _, sec, _ in self._modules(modules)) if mode == "selective" else 0.0

    def recompute_flops(self, mode: str, modules: frozenset[str] | None = None) -> float:
        if mode == "full":
            return self.fwd_flops
        return sum(fl for _, _, fl in self._modules(modules)) if mode == "selective" else 0.0


def _gemm_seconds(ops: list[GemmOp], gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, grouped_experts: bool = True
                  ) -> np.ndarray:
    if not ops:
        return np.zeros(0)
    arr = np.array([[o.m, o.k, o.n, o.batch, o.density] for o in ops], dtype=float)
    secs = gemm_times(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], gpu, eff, dtype, arr[:, 4])
    grouped = np.array([grouped_experts and o.name.startswith("experts.") for o in ops])
    if grouped.any():   # routed experts run as one grouped GEMM kernel, slower than a dense one of the same shape
        secs = np.where(grouped, eff.launch_s + (secs - eff.launch_s) / eff.grouped_fraction(dtype), secs)
    return secs


def _linear_seconds(ops: list[GemmOp], gpu: GpuSpec, eff: ComputeEfficiency, dtype: str,
                    grouped_experts: bool = True) -> np.ndarray:
    """Seconds of linear GEMMs, each in its :func:`linear_dtype`; ``grouped_experts``: the routed experts run as one
    grouped GEMM (False: one dense GEMM per expert, Megatron's SequentialMLP)."""
    out = np.zeros(len(ops))
    dtypes = [linear_dtype(o.name, dtype) for o in ops]
    for d in set(dtypes):
        idx = [i for i, x in enumerate(dtypes) if x == d]
        out[idx] = _gemm_seconds([ops[i] for i in idx], gpu, eff, d, grouped_experts)
    return out


def _mem_seconds(ops: list[MemOp], gpu: GpuSpec, eff: ComputeEfficiency, phase: str, attention: bool | None = None
                 ) -> float:
    sel = [o for o in ops if o.phase == phase and (attention is None or o.attention == attention)]
    return sum(o.bytes for o in sel) / (gpu.memory.bandwidth * eff.memory_efficiency) + eff.launch_s * len(sel)


def _is_attn(op: GemmOp) -> bool:
    return op.name.startswith("attn.")


def quantized(dtype: str) -> bool:
    """An fp8 or fp4 (NVFP4) GEMM dtype: the linear layers quantize their operands, the rest stays 16-bit."""
    return dtype.startswith(("fp8", "fp4"))


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


def fp8_cast_memops(linear: list[GemmOp], cast_bytes: tuple[float, float]) -> list[MemOp]:
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


def layer_time(model: ModelSpec, sh: RankShape, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, *,
               layer_index: int, attention: str = "flash", eager: bool = False, amp: bool = False,
               fp8_cast_bytes: tuple[float, float] = (0.0, 0.0), grad_accum_bytes: float = 0.0,
               host: HostIssueCosts | None = None, permute: PermuteChain = FUSED_PERMUTE,
               sequential_experts: bool = False, sort_chunks: bool = False,
               fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerTime:
    """Time of layer ``layer_index`` for one micro-batch on one rank whose share of the layer is ``sh`` (see module
    docstring for the model).

    ``eager``: plain PyTorch modules (layout copies around attention); ``amp``: torch.autocast over fp32 weights
    (fp32 residual stream, casts; see :func:`simulator.compute.memops.eager_memops`). With an fp8 ``dtype`` the
    linear layers run in fp8 and quantize their input (forward) and output gradient (backward) at
    ``fp8_cast_bytes`` extra bytes per element (:func:`fp8_cast_memops`); attention and the router stay 16-bit.
    ``grad_accum_bytes``: a separate gradient-accumulation pass per micro-batch (:func:`parameter_pass_memops`).
    ``host``: the eager framework's host issue costs (:mod:`simulator.compute.host`); None with CUDA graphs.
    ``permute``: the MoE permute + unpermute chain (``moe.permute``, :mod:`simulator.compute.op_chains`);
    ``sequential_experts``: the routed experts run one dense GEMM each and assemble their outputs (``moe.experts:
    sequential``, Megatron's SequentialMLP) instead of one grouped GEMM; ``sort_chunks``: the all-to-all dispatcher
    reorders the received rows by local expert and back (:func:`simulator.compute.memops.layer_memops`);
    ``fsdp_copy_bytes``: FSDP2's copies around its gathers and reductions (:func:`parameter_pass_memops`).
    """
    flash = attention in ("flash", "flash2", "sdpa")
    # every fused kernel (TE / FlashAttention-2 / PyTorch SDPA's flash backends) recomputes Q K^T in its backward,
    # and their measured rates count it (backward = 2.5x the forward FLOPs)
    lf = layer_flops(model, sh, layer_index=layer_index, causal=flash, attention="flash" if flash else attention)
    linear = [o for o in lf.ops if not _is_attn(o)]
    core = [o for o in lf.ops if _is_attn(o)]
    lin_s = _linear_seconds(linear, gpu, eff, dtype, grouped_experts=not sequential_experts)
    by_phase = {p: float(sum(t for o, t in zip(linear, lin_s, strict=True) if o.phase == p))
                for p in ("fwd", "bwd_dgrad", "bwd_wgrad")}
    expert = {p: float(sum(t for o, t in zip(linear, lin_s, strict=True) if o.phase in p
                           and o.name.startswith("experts."))) for p in (("fwd",), ("bwd_dgrad", "bwd_wgrad"))}
    attn_fwd_flops = sum(o.flops for o in core if o.phase == "fwd")
    attn_bwd_flops = sum(o.flops for o in core if o.phase != "fwd")
    moe = model.is_moe_layer(layer_index)
    shape = LayerShape(tokens=sh.tokens, norm_tokens=sh.norm_tokens, scores=sh.q_rows * sh.heads * sh.seq_len,
                       ffn_local=0.0 if moe else sh.ffn, qk_width=(sh.heads + sh.kv_heads) * model.dhead,
                       expert_ffn_local=model.moe.expert_ffn_hidden / sh.etp if moe else 0.0)
    mem = layer_memops(model, shape, unfused_attention=not flash, moe_routed_tokens=sh.routed_rows if moe else 0.0,
                       permute=permute, sequential_experts=sh.local_experts if moe and sequential_experts else 0.0,
                       sort_chunks=moe and sort_chunks)
    params = layer_params(model, layer_index)
    if eager:
        mem += eager_memops(model, shape, rank_numel(params, sh), amp=amp)
    if quantized(dtype):
        mem += fp8_cast_memops(linear, fp8_cast_bytes)
    mem += parameter_pass_memops(params, sh, grad_accum_bytes, fsdp_copy_bytes)
    if flash:
        fraction = eff.attention_fraction(attention, sh.seq_len / sh.cp, model.dhead)
        peak = peak_flops(gpu, attention_dtype(dtype)) * fraction
        attn_fwd, attn_bwd = attn_fwd_flops / peak + eff.launch_s, attn_bwd_flops / peak + eff.launch_s
    else:
        core_s = _gemm_seconds(core, gpu, eff, attention_dtype(dtype))
        attn_fwd = float(sum(t for o, t in zip(core, core_s, strict=True) if o.phase == "fwd"))
        attn_bwd = float(sum(t for o, t in zip(core, core_s, strict=True) if o.phase != "fwd"))
        attn_fwd += _mem_seconds(mem, gpu, eff, "fwd", attention=True)
        attn_bwd += _mem_seconds(mem, gpu, eff, "bwd", attention=True)
    other_fwd = _mem_seconds(mem, gpu, eff, "fwd", attention=False)
    other_bwd = _mem_seconds(mem, gpu, eff, "bwd", attention=False)
    modules = _module_forwards(linear, lin_s, mem, gpu, eff)
    host_fwd, host_bwd = host.layer(moe, sh.local_experts) if host is not None else (0.0, 0.0)
    return LayerTime(
        fwd_s=by_phase["fwd"] + attn_fwd + other_fwd,
        bwd_s=by_phase["bwd_dgrad"] + by_phase["bwd_wgrad"] + attn_bwd + other_bwd,
        attn_fwd_s=attn_fwd, attn_bwd_s=attn_bwd, wgrad_s=by_phase["bwd_wgrad"], dgrad_s=by_phase["bwd_dgrad"],
        fwd_gemm_s=by_phase["fwd"], expert_fwd_s=expert[("fwd",)], expert_bwd_s=expert[("bwd_dgrad", "bwd_wgrad")],
        fwd_flops=lf.forward_flops, bwd_flops=lf.backward_flops + lf.recompute_flops, attn_fwd_flops=attn_fwd_flops,
        module_fwd=modules, host_fwd_s=host_fwd, host_bwd_s=host_bwd)


def mean_layer_time(members: list[tuple[LayerTime, int]]) -> LayerTime:
    """The layer-count-weighted mean of layers that differ only in attention (e.g. sliding-window and full layers),
    field by field (module forwards by module)."""
    n = sum(count for _, count in members)
    nums = {f.name: sum(getattr(lt, f.name) * c for lt, c in members) / n for f in fields(LayerTime)
            if f.name != "module_fwd"}
    modules = {}
    for lt, c in members:
        for name, sec, flops in lt.module_fwd:
            s0, f0 = modules.get(name, (0.0, 0.0))
            modules[name] = (s0 + sec * c / n, f0 + flops * c / n)
    return LayerTime(**nums, module_fwd=tuple((k, s, f) for k, (s, f) in modules.items()))


#: Megatron-LM ``--recompute-modules`` -> (forward GEMM name prefixes, forward memory-bound op names) they re-run
#: (core_attn is the attention core, timed apart: ``LayerTime.attn_fwd_s``)
RECOMPUTE_MODULE_OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "layernorm": ((), ("norm1", "norm2")),
    "mlp": (("mlp.",), ("activation",)),
    "moe": (("router", "experts.", "shared_experts."), ("moe_permute", "moe_sort_chunks", "expert_assembly",
                                                         "expert_activation", "shared_activation")),
    "moe_act": ((), ("expert_activation",)),
    "shared_experts": (("shared_experts.",), ("shared_activation",)),
    "mla_up_proj": (("q_b_proj", "kv_b_proj"), ()),
}


def _module_forwards(linear: list[GemmOp], lin_s, mem: list[MemOp], gpu: GpuSpec, eff: ComputeEfficiency
                     ) -> tuple[tuple[str, float, float], ...]:
    """(module, forward seconds, forward FLOPs) of each module selective recompute can re-run (the layer's own
    forward GEMMs and memory-bound kernels of that module)."""
    out = []
    for name, (gemms, memops) in RECOMPUTE_MODULE_OPS.items():
        picked = [(o, t) for o, t in zip(linear, lin_s, strict=True) if o.phase == "fwd" and o.name.startswith(gemms)]
        mems = [o for o in mem if o.phase == "fwd" and o.name in memops]
        if not picked and not mems:
            continue
        sec = sum(t for _, t in picked) + _mem_seconds(mems, gpu, eff, "fwd")
        out.append((name, float(sec), float(sum(o.flops for o, _ in picked))))
    return tuple(out)


def expert_ffn_time(model: ModelSpec, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, rows_per_expert,
                    etp: int = 1) -> tuple[float, float, float]:
    """(forward, data-gradient, weight-gradient) seconds of one rank's routed-expert GEMMs when its local experts
    multiply ``rows_per_expert`` tokens each (one entry per local expert; padding included).

    The grouped GEMM is timed as one batched GEMM per distinct row count (experts with equal rows share a launch),
    so equal rows give exactly the shapes :func:`layer_time` uses for the expected (balanced) load.
    """
    rows, counts = np.unique(np.asarray(rows_per_expert, dtype=float), return_counts=True)
    ops = [o for r, n in zip(rows, counts, strict=True) if r > 0 for o in expert_mlp_ops(model, float(r), etp,
                                                                                      batch=int(n))]
    secs = _gemm_seconds(ops, gpu, eff, dtype)
    return tuple(float(sum(t for o, t in zip(ops, secs, strict=True) if o.phase == phase))
                 for phase in ("fwd", "bwd_dgrad", "bwd_wgrad"))


def head_time(model: ModelSpec, sh: RankShape, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str,
              grad_accum_bytes: float = 0.0, embedding_copy: bool = False,
              cross_entropy: tuple[float, float] = FUSED_CROSS_ENTROPY,
              fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerTime:
    """Final norm, output-layer GEMMs (tokens x h x v/tp) and cross entropy of the last stage, one micro-batch;
    ``grad_accum_bytes`` as :func:`layer_time`, over the head's parameters and, with ``embedding_copy`` (tied
    embeddings or MTP modules split over pipeline stages), the last stage's copy of the word embedding;
    ``cross_entropy``: bytes per logit forward and backward (``training.cross_entropy``); ``fsdp_copy_bytes`` as
    :func:`layer_time`."""
    lf = logits_flops(model, sh)
    ops = list(lf.ops)
    secs = _linear_seconds(ops, gpu, eff, dtype)
    mem = head_memops(model, sh.tokens, sh.norm_tokens, model.vocab / sh.tp, cross_entropy)
    params = head_params(model) + (embedding_params(model)[:1] if embedding_copy else [])
    mem += parameter_pass_memops(params, sh, grad_accum_bytes, fsdp_copy_bytes)
    fwd = float(sum(t for o, t in zip(ops, secs, strict=True) if o.phase == "fwd"))
    wgrad = float(sum(t for o, t in zip(ops, secs, strict=True) if o.phase == "bwd_wgrad"))
    dgrad = float(sum(t for o, t in zip(ops, secs, strict=True) if o.phase == "bwd_dgrad"))
    return LayerTime(fwd_s=fwd + _mem_seconds(mem, gpu, eff, "fwd"), bwd_s=wgrad + dgrad + _mem_seconds(mem, gpu, eff, "bwd"),
                     wgrad_s=wgrad, dgrad_s=dgrad, fwd_gemm_s=fwd, fwd_flops=lf.forward_flops,
                     bwd_flops=lf.backward_flops)


def embedding_time(model: ModelSpec, sh: RankShape, gpu: GpuSpec, eff: ComputeEfficiency,
                   grad_accum_bytes: float = 0.0, fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)) -> LayerTime:
    """Embedding lookup and its gradient on the first stage, one micro-batch (memory-bound); ``grad_accum_bytes``
    as :func:`layer_time`."""
    mem = embedding_memops(model, sh.tokens)
    mem += parameter_pass_memops(embedding_params(model), sh, grad_accum_bytes, fsdp_copy_bytes)
    return LayerTime(fwd_s=_mem_seconds(mem, gpu, eff, "fwd"), bwd_s=_mem_seconds(mem, gpu, eff, "bwd"))
