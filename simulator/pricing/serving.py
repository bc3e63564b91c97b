"""Seconds of a serving program's compute on one GPU, by the step breakdown's op classes (docs/serving/step_model.md): a
:class:`~simulator.program.LayerProgram` built by :mod:`simulator.program.serving` priced with the same per-op
functions as training's (:mod:`simulator.pricing.compute`).

- ``gemm`` / ``experts``: :func:`simulator.pricing.compute.gemm_op_seconds` (each GEMM in its compute and weight
  dtype; routed experts as grouped GEMMs with their ``slowdown``);
- ``attention``: :func:`cache_attention_seconds`;
- ``memory_ops``: :func:`simulator.pricing.compute.mem_op_seconds` (a kernel set's bytes without launches of their
  own, a stand-alone kernel with its launch);
- ``launch``: the program's ``launches`` (the kernel set's small kernels) at ``ComputeEfficiency.launch_s``.
"""

from __future__ import annotations

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.gemm import peak_flops
from simulator.hardware import GpuSpec
from simulator.pricing.compute import gemm_op_seconds, mem_op_seconds
from simulator.program import CacheAttentionOp, LayerProgram


def cache_attention_seconds(op: CacheAttentionOp, gpu: GpuSpec, eff: ComputeEfficiency) -> float:
    """One launch plus the slower of the op's FLOPs and its K/V cache read. Prefill: FLOPs at the forward
    FlashAttention curve (``attention_fraction("sdpa_fwd", seq_len, dhead)`` of the 16-bit peak), the cache at the
    memory-bound rate (``memory_efficiency``); decode: the cache at the kernel's ``kv_read_efficiency`` of HBM
    bandwidth capped at ``kv_cap_Bps``, FLOPs at its ``compute_efficiency`` (or the forward curve); a call form with a
    measured floor pays ``floor_s`` instead of the launch, and a per-call K/V expansion adds ``copy_bytes`` at
    ``copy_efficiency`` of HBM bandwidth; a kernel bound by its CTAs' work takes at least ``ctas x cta_s + elements /
    element_rate``."""
    peak = peak_flops(gpu, op.dtype)
    fa_rate = peak * eff.attention_fraction("sdpa_fwd", op.seq_len, op.dhead)
    if not op.decode:
        return eff.launch_s + max(op.flops / fa_rate, op.kv_bytes / (gpu.memory.bandwidth * eff.memory_efficiency))
    rate = min(gpu.memory.bandwidth * op.kv_read_efficiency, op.kv_cap_Bps)
    compute = fa_rate if op.compute_efficiency is None else peak * op.compute_efficiency
    fixed = eff.launch_s if op.floor_s is None else op.floor_s
    copy = op.copy_bytes / (gpu.memory.bandwidth * op.copy_efficiency) if op.copy_bytes else 0.0
    ctas = op.ctas * op.cta_s + op.elements / op.element_rate
    return fixed + copy + max(op.kv_bytes / rate, op.flops / compute, ctas)


def price_serving(program: LayerProgram, gpu: GpuSpec, eff: ComputeEfficiency) -> dict[str, float]:
    """Seconds of ``program`` (forward only) by op class: gemm, experts, attention, memory_ops, launch."""
    secs = gemm_op_seconds(program.gemms, gpu, eff)
    experts = float(sum(t for o, t in zip(program.gemms, secs, strict=True) if o.expert))
    att = program.attention
    dense = float(sum(t for o, t in zip(program.gemms, secs, strict=True) if not o.expert))
    return {"gemm": dense, "experts": experts,
            "attention": cache_attention_seconds(att, gpu, eff) if isinstance(att, CacheAttentionOp) else 0.0,
            "memory_ops": mem_op_seconds(program.memops, gpu, eff, "fwd"),
            "launch": program.launches * eff.launch_s}
