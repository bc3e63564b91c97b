"""1F1B's stage end times (no interleaving, m >= p micro-batches) in closed form around an extrapolated steady
state: O(p^2) numpy work and a handful of steady periods per batch of plans, flat in m.

With zero transfer lag an op ends at ``C(x) = max(C(previous op on x's stage), C(x's data dependency)) + d(x)``
(:mod:`simulator.schedule.fast_timeline`). Number 1F1B's ops by period t: stage i (w_i = p - 1 - i warm-up
forwards) runs in period t the forward of micro-batch w_i + t (when 0 <= w_i + t < m) and then the backward of
micro-batch t (when 0 <= t < m). The forward's data dependency is stage i - 1's forward of period t - 1, the
backward's stage i + 1's backward of period t (its own forward on the last stage). Three regions:

- Warm-up (t < 0, forwards only): a flow shop of identical jobs, as GPipe's forwards, so stage i's last warm-up
  forward ends at ``F_i(-1) = sum_{l<=i} f_l + (w_i - 1) max_{l<=i} f_l`` (:func:`simulator.schedule.fast_timeline.
  gpipe_ends`' lattice-path argument).
- Steady (0 <= t <= m - p + i on stage i: a forward and a backward): ``F_i(t) = max(B_i(t-1), F_{i-1}(t-1)) + f_i``,
  ``B_i(t) = max_{k>=i} [F_k(t) + sum_{l=i..k} b_l]`` (one suffix maximum per period). The map from period t - 1
  to t is max-plus linear and commutes with adding a constant, so once period t equals period t - 1 plus one
  constant c on every stage (forward and backward ends), every later period is the one before plus c:
  the recurrence runs until then (the transient, a few periods when one stage sets the pace) and the rest is
  added as multiples of c. The cells (i, t <= m - p + i) depend only on each other, so the recurrence may run
  over all stages past stage 0's last forward; stage k's last steady backward ``R_k = B_k(m - p + k)`` is read off.
- Cool-down (backwards only): from R_k a path climbs to stage i through stages i..k - 1 once each and spends
  its p - 1 - k remaining periods on the slowest backward of stages i..k, so
  ``E_i = max_{k>=i} [R_k + sum_{l=i}^{k-1} b_l + (p - 1 - k) max_{l=i..k} b_l]``.

The sums are taken in another order than the replay's: the ends agree with it within ~1e-15 relative (a
hypothesis test holds them within 1e-9).
"""

from __future__ import annotations

import numpy as np

from simulator.schedule.steady import REPEAT_RTOL


def one_f_one_b_ends(m: int, durations: np.ndarray) -> np.ndarray:
    """Stage ends ``(batch, pp)`` of 1F1B (vpp 1, ``m >= pp``) for ``durations`` ``(batch, pp, 1, 2)``
    (module docstring)."""
    f, b = durations[:, :, 0, 0], durations[:, :, 0, 1]
    batch, pp = f.shape
    if m < pp:
        raise ValueError(f"one_f_one_b_ends needs m >= pp, got m {m} < pp {pp} (internal error)")
    w = pp - 1 - np.arange(pp)
    forward = np.cumsum(f, axis=1) + (w - 1) * np.maximum.accumulate(f, axis=1)   # F_i(-1), w_i >= 1
    forward[:, -1] = 0.0                 # the last stage has no warm-up: nothing before its first forward
    last = forward.copy()                # each stage's previous op: its last warm-up forward
    suffix = np.zeros((batch, pp + 1))
    suffix[:, :pp] = np.cumsum(b[:, ::-1], axis=1)[:, ::-1]       # sum_{l>=i} b_l
    head, tail = suffix[:, :pp], suffix[:, 1:]
    release = np.empty((batch, pp))      # R_k
    todo = np.arange(batch)
    first_cool = m - pp                  # stage k's last steady period is first_cool + k
    for t in range(m):
        fn = last.copy()
        np.maximum(last[:, 1:], forward[:, :-1], out=fn[:, 1:])
        fn += f[todo]
        bn = np.maximum.accumulate((fn - tail[todo])[:, ::-1], axis=1)[:, ::-1] + head[todo]
        k = t - first_cool
        if 0 <= k < pp:
            release[todo, k] = bn[:, k]
        c = bn[:, :1] - last[:, :1]
        tol = REPEAT_RTOL * np.abs(bn).max(axis=1, keepdims=True)
        steady = ((np.abs(fn - forward - c) <= tol) & (np.abs(bn - last - c) <= tol)).all(axis=1)
        if steady.any():                 # every later period is this one plus c: the rest by multiples of c
            ahead = np.arange(pp) + first_cool - t          # periods from t to stage k's last steady one
            rows = todo[steady]
            later = ahead > 0
            release[rows[:, None], np.flatnonzero(later)[None, :]] = \
                bn[steady][:, later] + ahead[later] * c[steady]
            todo, fn, bn = todo[~steady], fn[~steady], bn[~steady]
            if todo.size == 0:
                break
        forward, last = fn, bn
    return _cool_down(release, b)


def _cool_down(release: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``E_i = max_{k>=i} [R_k + sum_{l=i}^{k-1} b_l + (p - 1 - k) max_{l=i..k} b_l]`` for all i at once."""
    batch, pp = b.shape
    prefix = np.zeros((batch, pp + 1))
    prefix[:, 1:] = np.cumsum(b, axis=1)
    upper = np.triu(np.ones((pp, pp), dtype=bool))                  # [i, k]: k >= i
    span_max = np.maximum.accumulate(np.where(upper, b[:, None, :], -np.inf), axis=2)   # max b_{i..k}
    total = (release[:, None, :] + prefix[:, None, :pp] - prefix[:, :pp, None]
             + (pp - 1 - np.arange(pp)) * span_max)
    return np.where(upper, total, -np.inf).max(axis=2)
