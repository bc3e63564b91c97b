"""The expected slowest of N GPUs: a synchronous step runs at the pace of its slowest GPU.

Identical GPUs differ in speed by manufacturing and power management, persistently (Sinha et al., SC'22: 8% on
average between the fastest and slowest of a cluster's GPUs on compute-bound kernels). Every collective of a step
waits for its slowest member and the step ends with the data-parallel synchronisation of all of them, so the
compute of a step on N GPUs takes the time of the slowest one. With per-GPU speed normal around the median with
relative spread ``sigma`` (``data/overlap.yaml`` ``gpu_speed_sigma``), its expected slowdown is ``sigma x z(N)``,
z(N) the expected maximum of N standard normal draws, integrated numerically from the order-statistic density
N phi(x) Phi(x)^(N-1) (z(8) = 1.423, z(256) = 2.826, z(16384) = 3.971). Coefficients fitted on ``calibration_gpus`` GPUs in lock step
already contain z(calibration_gpus), so the factor is relative to it.
"""

from __future__ import annotations

import numpy as np

from simulator.caching import memo

_X = np.linspace(-9.0, 9.0, 18001)
_PDF = np.exp(-_X**2 / 2) / np.sqrt(2 * np.pi)
_LOG_CDF = np.log(np.clip(np.cumsum(_PDF) * (_X[1] - _X[0]), 1e-300, 1.0))


@memo(maxsize=1024)
def expected_max_z(n: int) -> float:
    """Expected maximum of ``n`` standard normal draws: the integral of x N phi(x) Phi(x)^(N-1) (0 for one)."""
    if n <= 1:
        return 0.0
    density = n * _PDF * np.exp((n - 1) * _LOG_CDF)
    return float(np.trapezoid(_X * density, _X) / np.trapezoid(density, _X))


def straggler_factor(gpus: int, sigma: float, calibration_gpus: int = 1) -> float:
    """Factor on compute time of a step on ``gpus`` GPUs whose speeds spread by ``sigma`` (module docstring)."""
    return (1 + sigma * expected_max_z(gpus)) / (1 + sigma * expected_max_z(calibration_gpus))
