"""A seeded Monte Carlo of a run's interruptions (``run.monte_carlo``), for distributions around the expectation.

Each sample walks the run: work in checkpoint periods of ``interval`` productive seconds and ``stall`` seconds of
checkpoint; failures arrive with exponential gaps (rate ``lambda``, the same memoryless model as the expectation);
a failure loses the work since the last durable checkpoint and costs ``restart`` seconds, during which another
failure restarts the restart. numpy's ``default_rng(seed)``: the same seed gives the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Distribution:
    """Wall seconds and interruptions over the samples: mean, 10th and 90th percentiles."""

    wall_s: tuple[float, float, float]
    interruptions: tuple[float, float, float]
    samples: int

    def to_dict(self) -> dict:
        keys = ("mean", "p10", "p90")
        return {"samples": self.samples, "wall_s": dict(zip(keys, self.wall_s, strict=True)),
                "interruptions": dict(zip(keys, self.interruptions, strict=True))}


def _one(rng: np.random.Generator, productive_s: float, interval_s: float, stall_s: float, mtbf_s: float,
         restart_s: float, lag_s: float) -> tuple[float, int]:
    done, wall, failures = 0.0, 0.0, 0
    period = interval_s + stall_s
    while done < productive_s:
        remaining = productive_s - done
        finish = remaining + (math.ceil(remaining / interval_s) - 1) * stall_s
        gap = rng.exponential(mtbf_s)
        if gap >= finish:
            return wall + finish, failures
        durable = max(0, math.floor((gap - lag_s) / period))
        done += durable * interval_s
        wall += gap
        failures += 1
        while True:   # the restart; a failure during it starts it again
            again = rng.exponential(mtbf_s)
            if again >= restart_s:
                wall += restart_s
                break
            wall += again
            failures += 1
    return wall, failures


def sample(productive_s: float, interval_s: float, stall_s: float, rate_per_s: float, restart_s: float,
           lag_s: float, samples: int, seed: int) -> Distribution:
    """``samples`` runs from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    mtbf = 1.0 / rate_per_s if rate_per_s > 0 else math.inf
    runs = np.array([_one(rng, productive_s, interval_s, stall_s, mtbf, restart_s, lag_s) for _ in range(samples)])

    def stats(column: np.ndarray) -> tuple[float, float, float]:
        return float(column.mean()), float(np.percentile(column, 10)), float(np.percentile(column, 90))

    return Distribution(stats(runs[:, 0]), stats(runs[:, 1]), samples)
