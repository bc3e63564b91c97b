"""Time of each op on a GPU spec: GEMMs (shape-dependent efficiency), memory-bound ops, attention, optimizer.

Imports ``simulator.model``, ``simulator.hardware`` and ``simulator.units`` only (docs/architecture.md).
"""

from simulator.compute.efficiency import ComputeEfficiency, TileShape, default_efficiency
from simulator.compute.fit import (
    GemmRow,
    fit_errors,
    fit_gemm_efficiency,
    fit_peak_fraction,
    format_fit_table,
    read_gemm_csv,
)
from simulator.compute.gemm import DTYPE_BYTES, gemm_efficiency, gemm_times

__all__ = [
    "DTYPE_BYTES", "ComputeEfficiency", "GemmRow", "TileShape", "default_efficiency", "fit_errors",
    "fit_gemm_efficiency", "fit_peak_fraction", "format_fit_table", "gemm_efficiency", "gemm_times", "read_gemm_csv",
]
