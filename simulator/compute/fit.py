"""Fit the GEMM efficiency coefficients to measured GEMMs (a ``simulator measure gemm`` CSV).

Least squares on log(predicted / measured time) over every row (scipy ``least_squares``), fitting the peak
fraction of each dtype present, the tile efficiencies, ``k_overhead``, ``launch_s``, ``split_k_efficiency`` and
``memory_efficiency``. Tile shapes and split factors stay as in the starting table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.gemm import gemm_times
from simulator.hardware import GpuSpec
from simulator.resources import commented_csv
from simulator.units import MILLI


@dataclass(frozen=True)
class GemmRow:
    """One measured GEMM: C[m, n] = A[m, k] B[k, n] in ``dtype`` took ``time_s``."""

    dtype: str
    m: int
    k: int
    n: int
    time_s: float


def read_gemm_csv(path: str | Path) -> list[GemmRow]:
    """Rows of a GEMM CSV with columns ``dtype,m,k,n,time_ms[,tflops]`` (``#`` lines are comments)."""
    return [GemmRow(r["dtype"], int(r["m"]), int(r["k"]), int(r["n"]), float(r["time_ms"]) * MILLI)
            for r in commented_csv(Path(path))]


def predict(rows: list[GemmRow], gpu: GpuSpec, eff: ComputeEfficiency) -> np.ndarray:
    """Model time (s) of each measured row."""
    out = np.empty(len(rows))
    for dtype in {r.dtype for r in rows}:
        idx = [i for i, r in enumerate(rows) if r.dtype == dtype]
        sel = [rows[i] for i in idx]
        out[idx] = gemm_times([r.m for r in sel], [r.k for r in sel], [r.n for r in sel], 1, gpu, eff, dtype)
    return out


def _unpack(x: np.ndarray, base: ComputeEfficiency, dtypes: list[str]) -> ComputeEfficiency:
    nd, nt = len(dtypes), len(base.tiles)
    fractions = dict(base.peak_fraction)
    fractions.update({d: float(np.clip(x[i], 0.01, 1.0)) for i, d in enumerate(dtypes)})
    tiles = tuple(t.model_copy(update={"efficiency": float(np.clip(x[nd + j], 0.05, 1.0))})
                  for j, t in enumerate(base.tiles))
    k_over, launch, split_eff, mem = x[nd + nt:nd + nt + 4]
    return base.model_copy(update=dict(
        peak_fraction=fractions, tiles=tiles, k_overhead=float(max(k_over, 0.0)), launch_s=float(max(launch, 0.0)),
        split_k_efficiency=float(np.clip(split_eff, 0.05, 1.0)), memory_efficiency=float(np.clip(mem, 0.05, 1.0))))


def fit_gemm_efficiency(rows: list[GemmRow], gpu: GpuSpec, start: ComputeEfficiency, source: str = "fit",
                        shape_dtypes: tuple[str, ...] = ("bf16", "fp16")) -> ComputeEfficiency:
    """Coefficients minimising the squared log time error over ``rows`` on ``gpu``, starting from ``start``.

    The shape terms (tiles, k_overhead, launch, split-K, memory efficiency) are fitted on the rows of
    ``shape_dtypes`` (the training dtypes; fp32 GEMMs run on CUDA cores with other kernels); then the peak fraction
    of every other dtype present is fitted with the shape terms frozen.
    """
    shape_rows = [r for r in rows if r.dtype in shape_dtypes] or rows
    fitted = _fit(shape_rows, gpu, start, shape=True)
    others = [r for r in rows if r not in shape_rows]
    if others:
        fitted = _fit(others, gpu, fitted, shape=False)
    return fitted.model_copy(update={"source": source})


def _fit(rows: list[GemmRow], gpu: GpuSpec, start: ComputeEfficiency, shape: bool) -> ComputeEfficiency:
    from scipy.optimize import least_squares  # lazy: only fitting needs scipy (the `fit` extra)

    dtypes = sorted({r.dtype for r in rows})
    measured = np.array([r.time_s for r in rows])
    x0 = np.array([start.peak_fraction.get(d, 0.7) for d in dtypes] + [t.efficiency for t in start.tiles]
                  + [start.k_overhead, start.launch_s, start.split_k_efficiency, start.memory_efficiency])
    scale = np.where(np.arange(x0.size) == len(dtypes) + len(start.tiles) + 1, 1e-6, 1.0)

    free = np.arange(x0.size) < (x0.size if shape else len(dtypes))

    def full(z: np.ndarray) -> np.ndarray:
        x = x0 / scale
        x[free] = z
        return x * scale

    def residual(z: np.ndarray) -> np.ndarray:
        return np.log(predict(rows, gpu, _unpack(full(z), start, dtypes)) / measured)

    result = least_squares(residual, (x0 / scale)[free], method="trf", diff_step=1e-3)
    return _unpack(full(result.x), start, dtypes)


def fit_errors(rows: list[GemmRow], gpu: GpuSpec, eff: ComputeEfficiency) -> np.ndarray:
    """Relative error (predicted / measured - 1) of each row."""
    return predict(rows, gpu, eff) / np.array([r.time_s for r in rows]) - 1.0


def format_fit_table(rows: list[GemmRow], gpu: GpuSpec, eff: ComputeEfficiency) -> str:
    """A text table of measured vs predicted time and TFLOP/s per row, and the error summary per dtype."""
    err = fit_errors(rows, gpu, eff)
    pred = predict(rows, gpu, eff)
    lines = [f"{'dtype':5} {'m':>6} {'k':>6} {'n':>6} {'meas_ms':>9} {'model_ms':>9} {'meas_TF':>8} {'err':>7}"]
    for r, p, e in zip(rows, pred, err, strict=True):
        tf = 2 * r.m * r.k * r.n / r.time_s / 1e12
        lines.append(f"{r.dtype:5} {r.m:6d} {r.k:6d} {r.n:6d} {r.time_s * 1e3:9.4f} {p * 1e3:9.4f} {tf:8.1f} "
                     f"{e:+7.1%}")
    for d in sorted({r.dtype for r in rows}):
        e = np.abs(np.array([x for x, r in zip(err, rows, strict=True) if r.dtype == d]))
        lines.append(f"{d}: rows {e.size}, mean |err| {e.mean():.1%}, max |err| {e.max():.1%}")
    lines.append(f"all: rows {err.size}, mean |err| {np.abs(err).mean():.1%}, max |err| {np.abs(err).max():.1%}")
    return "\n".join(lines)


def fit_peak_fraction(rows: list[GemmRow], gpu: GpuSpec, start: ComputeEfficiency, dtype: str,
                      source: str = "fit") -> tuple[ComputeEfficiency, bool]:
    """``start`` with the peak fraction of ``dtype`` set so that the model's total time over ``rows`` (those of
    ``dtype``) equals their measured total (the shape terms kept): the one number a profiler trace's GEMMs pin down
    without a sweep of shapes. The model time falls monotonically as the fraction grows, so the root is found by
    bisection on [0.01, 1] (40 halvings: ~1e-12 in the fraction). Returns (table, clamped): clamped is True when
    even the bound cannot match (the GEMMs were memory- or launch-bound in the model, or faster than the peak)."""
    mine = [r for r in rows if r.dtype == dtype]
    measured = sum(r.time_s for r in mine)

    def total(fraction: float) -> float:
        table = start.model_copy(update={"peak_fraction": {**start.peak_fraction, dtype: fraction}})
        return float(predict(mine, gpu, table).sum())

    lo, hi = 0.01, 1.0
    clamped = total(hi) > measured or total(lo) < measured
    if total(hi) > measured:
        lo = hi
    elif total(lo) < measured:
        hi = lo
    for _ in range(40 if not clamped else 0):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(mid) > measured else (lo, mid)
    fraction = 0.5 * (lo + hi)
    return start.model_copy(update={"peak_fraction": {**start.peak_fraction, dtype: fraction},
                                    "source": source}), clamped
