"""Measured time-vs-size curves of point-to-point exchanges (a calibration's ``curve`` points), interpolated.

NCCL's p2p exchange time on 2x H200 is concave in the size: the effective bandwidth still grows from 128 GB/s at
1 MiB to 360 GB/s at 1 GiB (simulator/validation/data/h200x2_kit/sendrecv_perf.*), which no ``max`` of two lines can
follow (it is convex). A calibrated p2p link therefore keeps the measured points and the model interpolates them:
log-log between points, the first time below the first point, the last segment's slope (in seconds per byte)
beyond the last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Curve:
    """Seconds of one exchange of ``m`` bytes (per rank and direction), from measured points."""

    bytes: np.ndarray
    seconds: np.ndarray

    @classmethod
    def from_points(cls, points) -> Curve:
        pts = sorted((float(m), float(t)) for m, t in points)
        m, t = (np.array(x) for x in zip(*pts, strict=True))
        return cls(m, np.maximum.accumulate(t))  # a larger exchange never takes less time

    def time(self, m) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        x, t = self.bytes, self.seconds
        inside = np.exp(np.interp(np.log(np.clip(m, x[0], x[-1])), np.log(x), np.log(t)))
        if x.size < 2:
            return inside
        slope = max((t[-1] - t[-2]) / (x[-1] - x[-2]), 0.0)
        return np.where(m > x[-1], t[-1] + (m - x[-1]) * slope, inside)


def pool_points(curves: list[list[tuple[float, float]]]) -> tuple[tuple[float, float], ...]:
    """One curve from several files: at each size the geometric mean of the files that measured it."""
    by_size: dict[float, list[float]] = {}
    for points in curves:
        for m, t in points:
            by_size.setdefault(float(m), []).append(float(t))
    return tuple((m, float(np.exp(np.mean(np.log(ts))))) for m, ts in sorted(by_size.items()))
