"""Time of (batched) GEMMs on one GPU: tensor peak x a shape-dependent achievable efficiency, under an HBM roofline.

Model (coefficients in :class:`~simulator.compute.efficiency.ComputeEfficiency`):

- The library tiles the m x n output into CTA tiles (one of ``tiles``), optionally splitting k (``split_k``).
  Tiles run in waves of one tile per SM, so a GEMM with ``T`` tiles takes ``ceil(T / SMs)`` waves; the useful
  fraction is ``(m n batch) / (padded tile area) x T / (waves x SMs)`` (wave and tile quantization; NVIDIA
  "Matrix Multiplication Background User's Guide", sections "Tile Quantization" and "Wave Quantization"); with
  ``wave_quantization`` w < 1 the waves are ``max(1, w ceil(T / SMs) + (1 - w) T / SMs)`` (a persistent tile
  scheduler spreads the last partial wave's work; a GEMM of one wave or less keeps it).
- Short reductions pay a fixed prologue/epilogue per tile: factor ``k / (k + k_overhead)``.
- The best (tile, split) pair wins, as cuBLAS heuristics pick it.
- A GEMM cannot beat streaming its operands once: ``bytes / (HBM bandwidth x memory_efficiency)`` with bytes =
  ``(m k + k n + m n) x batch x dtype bytes`` (roofline; Williams et al., CACM 2009).
- ``launch_s`` is added per kernel.

All functions take numpy arrays, so a whole layer's ops are timed in one call.
"""

from __future__ import annotations

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.hardware import GpuSpec
from simulator.model.quantization import FORMAT_BYTES

#: bytes per element of each GEMM dtype
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_block": 1, "int8": 1, "fp6": 0.75,
               "fp4": 0.5625,  # fp4: NVFP4, 4 bits + an 8-bit scale per 16 elements
               # weight-only checkpoint formats, read by weight-only kernels (model.weight_quantization)
               "mxfp4": FORMAT_BYTES["mxfp4"], "nvfp4": FORMAT_BYTES["nvfp4"]}
#: the tensor-core peak each GEMM dtype runs at (block-scaled fp8 runs on the fp8 tensor cores)
PEAK_DTYPE = {"fp8_block": "fp8"}


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Dense tensor peak of ``dtype`` on ``gpu`` (bf16's where the GPU has no such tensor cores)."""
    base = PEAK_DTYPE.get(dtype, dtype)
    return gpu.dense_peak_flops(base if base in gpu.dtypes else "bf16")


def gemm_efficiency(m, k, n, batch, sms: int, eff: ComputeEfficiency, dtype: str) -> np.ndarray:
    """Achievable fraction of the dense ``dtype`` peak for GEMMs of shape (m, k, n) x batch (arrays broadcast).

    Returns ``peak_fraction[dtype] x max over (tile, split) of tile.efficiency x quantization x k-factor``.
    """
    m, k, n, batch = (np.asarray(x, dtype=float) for x in (m, k, n, batch))
    m, k, n, batch = np.broadcast_arrays(np.maximum(m, 1.0), np.maximum(k, 1.0), np.maximum(n, 1.0),
                                         np.maximum(batch, 1.0))
    best = np.zeros(m.shape)
    for tile in eff.tiles:
        tm, tn = np.ceil(m / tile.m), np.ceil(n / tile.n)
        pad = (m * n) / (tm * tile.m * tn * tile.n)
        for split in eff.split_k:
            tiles = tm * tn * batch * split
            w = eff.wave_quantization
            waves = np.maximum(w * np.ceil(tiles / sms) + (1 - w) * tiles / sms, 1.0)
            kk = k / split
            e = tile.efficiency * pad * tiles / (waves * sms) * kk / (kk + eff.k_overhead)
            if split > 1:
                e = np.where(kk >= 2 * eff.k_overhead, e * eff.split_k_efficiency, 0.0)
            best = np.maximum(best, e)
    return eff.fraction(dtype) * best


def gemm_times(m, k, n, batch, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, density=1.0,
               weight_dtype: str = "") -> np.ndarray:
    """Seconds of each GEMM: ``launch + max(compute, memory)`` (see module docstring); ``density`` scales FLOPs
    and the output for causal-masked score GEMMs; ``weight_dtype``: the [k, n] operand's dtype when a weight-only
    kernel reads it narrower than it computes ("": ``dtype``)."""
    m, k, n, batch, density = (np.asarray(x, dtype=float) for x in (m, k, n, batch, density))
    flops = 2.0 * m * k * n * batch * density
    peak = peak_flops(gpu, dtype)
    compute = flops / (peak * gemm_efficiency(m, k, n, batch, gpu.sms, eff, dtype))
    w = DTYPE_BYTES[weight_dtype or dtype]
    size = batch * (DTYPE_BYTES[dtype] * (m * k + m * n * density) + w * k * n)
    memory = size / (gpu.memory.bandwidth * eff.memory_efficiency)
    return eff.launch_s + np.maximum(compute, memory)
