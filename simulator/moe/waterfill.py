"""Inclusion probabilities of top-k sampling without replacement, by water-filling."""

from __future__ import annotations

import numpy as np


def waterfill(weights: np.ndarray, total: float, cap: np.ndarray, iterations: int = 100) -> np.ndarray:
    """``pi_i = min(cap_i, c * w_i)`` with c chosen so that ``sum(pi) = total`` (bisection on c).

    The inclusion probability of item i when ``total`` items are drawn without replacement in proportion to
    ``weights`` is approximately this: proportional to the weight until it saturates at its cap (here 1, or the
    probability that its node is selected at all). Exact for equal weights. Raises nothing: when the caps cannot
    hold ``total``, every item sits at its cap.
    """
    w = np.asarray(weights, dtype=float)
    cap = np.asarray(cap, dtype=float)
    if float(np.minimum(cap, np.where(w > 0, np.inf, 0.0)).sum()) <= total:
        return np.where(w > 0, cap, 0.0)
    lo, hi = 0.0, 1.0
    while float(np.minimum(cap, hi * w).sum()) < total:
        hi *= 2.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if float(np.minimum(cap, mid * w).sum()) < total:
            lo = mid
        else:
            hi = mid
    return np.minimum(cap, hi * w)
