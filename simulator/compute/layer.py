"""What one layer (or the embedding and output head) costs on one GPU for one micro-batch: the result type
:class:`LayerTime`, and the per-op time functions the pricing layer (:mod:`simulator.pricing.compute`) turns a
program's ops into seconds with.

GEMMs run through :func:`simulator.compute.gemm.gemm_times` (routed experts as one grouped GEMM, slower than a
dense GEMM of the same shape: ``ComputeEfficiency.grouped_fraction``); memory-bound ops at the achievable HBM
bandwidth (``HBM bandwidth x memory_efficiency``) plus a launch each; fused attention at its fitted fraction of the
tensor peak (``ComputeEfficiency.attention_fraction``; backward re-computes Q K^T inside the kernel).

Recompute (Korthikanti et al. 2023, Sec. 5): ``full`` re-runs the whole layer forward inside backward;
``selective`` re-runs the core attention forward (Q K^T, softmax, dropout, P V) or the chosen modules' forwards;
module ``op_sac`` is what torchtitan's op-level policy re-runs (:mod:`simulator.program.op_sac`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.gemm import gemm_times, peak_flops
from simulator.hardware import GpuSpec


@dataclass(frozen=True)
class LayerTime:
    """Seconds and FLOPs of one layer (or head/embedding) for one micro-batch on one GPU.

    ``fwd_s``/``bwd_s`` are model work (backward includes flash attention's in-kernel recomputation).
    ``attn_fwd_s``/``attn_bwd_s`` the core attention share (the window CP hides its ring steps behind, and what
    selective recompute re-runs); ``wgrad_s``/``dgrad_s`` the backward GEMMs (windows for TP overlap);
    ``fwd_gemm_s`` the forward GEMMs (window for ``tp_comm_overlap``); ``expert_fwd_s``/``expert_bwd_s`` the
    routed-expert GEMMs. FLOPs: ``fwd_flops``/``bwd_flops`` executed, ``attn_fwd_flops`` the core attention's.
    ``host_fwd_s``/``host_bwd_s``: host seconds to issue the layer's kernels eagerly (0 with CUDA graphs;
    :mod:`simulator.compute.host`); ``host_ckpt_fwd_s``/``host_ckpt_bwd_s`` what activation checkpointing adds to
    them, ``host_sac_fwd_s``/``host_sac_bwd_s`` what op-level selective checkpointing adds (module ``op_sac``); ``host_runs_ahead``: no device-to-host sync in the layer, so the host issues ahead across layers.
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
    host_ckpt_fwd_s: float = 0.0
    host_ckpt_bwd_s: float = 0.0
    host_sac_fwd_s: float = 0.0
    host_sac_bwd_s: float = 0.0
    host_runs_ahead: bool = False

    def _modules(self, modules) -> tuple[tuple[str, float, float], ...]:
        chosen = modules or ("core_attn",)
        parts = dict((name, (sec, flops)) for name, sec, flops in self.module_fwd)
        parts.setdefault("core_attn", (self.attn_fwd_s, self.attn_fwd_flops))
        # sorted: ``modules`` is a frozenset, whose order follows the process's string hashing; summing in it gave
        # sums that differ in the last bit between processes (a Ray worker and the driver, issue 30)
        return tuple((name, *parts[name]) for name in sorted(chosen) if name in parts)

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


def gemm_seconds(shapes: np.ndarray, grouped: np.ndarray, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str,
                 slowdown: np.ndarray | None = None, weight_dtype: str = "") -> np.ndarray:
    """Seconds of each GEMM of one ``dtype``: ``shapes`` rows (m, k, n, batch, density) in elements;
    ``grouped`` marks the routed experts run as one grouped GEMM kernel, slower than a dense one of the same shape
    (``launch + (dense seconds - launch) / grouped_fraction x slowdown``; measured:
    ``simulator/validation/data/h200_moe``; ``slowdown`` default 1); ``weight_dtype``: :func:`gemm_times`."""
    if not len(shapes):
        return np.zeros(0)
    secs = gemm_times(shapes[:, 0], shapes[:, 1], shapes[:, 2], shapes[:, 3], gpu, eff, dtype, shapes[:, 4],
                      weight_dtype)
    if grouped.any():
        scale = 1.0 if slowdown is None else slowdown
        secs = np.where(grouped, eff.launch_s + (secs - eff.launch_s) / eff.grouped_fraction(dtype) * scale, secs)
    return secs


def memory_seconds(total_bytes: float, kernels: int, gpu: GpuSpec, eff: ComputeEfficiency) -> float:
    """Seconds of ``kernels`` memory-bound kernels moving ``total_bytes`` through HBM: bytes at
    ``HBM bandwidth x memory_efficiency`` plus a launch each."""
    return total_bytes / (gpu.memory.bandwidth * eff.memory_efficiency) + eff.launch_s * kernels


def fused_attention_seconds(fwd_flops: float, bwd_flops: float, kernel: str, seq_len: float, dhead: int,
                            gpu: GpuSpec, eff: ComputeEfficiency, dtype: str) -> tuple[float, float]:
    """(forward, backward) seconds of a fused attention kernel (``flash``, ``flash2``, ``sdpa``): its FLOPs at
    ``attention_fraction(kernel, seq_len, dhead)`` of the ``dtype`` tensor peak, plus a launch each."""
    peak = peak_flops(gpu, dtype) * eff.attention_fraction(kernel, seq_len, dhead)
    return fwd_flops / peak + eff.launch_s, bwd_flops / peak + eff.launch_s


def mean_layer_time(members: list[tuple[LayerTime, int]]) -> LayerTime:
    """The layer-count-weighted mean of layers that differ only in attention (e.g. sliding-window and full layers),
    field by field (module forwards by module)."""
    n = sum(count for _, count in members)
    nums = {f.name: sum(getattr(lt, f.name) * c for lt, c in members) / n for f in fields(LayerTime)
            if f.name not in ("module_fwd", "host_runs_ahead")}
    nums["host_runs_ahead"] = members[0][0].host_runs_ahead     # one kind of layer: one sync structure
    modules = {}
    for lt, c in members:
        for name, sec, flops in lt.module_fwd:
            s0, f0 = modules.get(name, (0.0, 0.0))
            modules[name] = (s0 + sec * c / n, f0 + flops * c / n)
    return LayerTime(**nums, module_fwd=tuple((k, s, f) for k, (s, f) in modules.items()))
