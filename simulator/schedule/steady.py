"""Stage end times of a periodic pipeline schedule at a cost that does not grow with micro-batches.

With zero transfer lag the completion time of an op is ``C(x) = max(C(previous op on x's stage), C(x's data
dependency)) + d(x)`` (:mod:`simulator.schedule.fast_timeline`): a max-plus linear recurrence. 1F1B and interleaved
1F1B repeat one pattern in their steady state: on every stage, the op ``L = 2 v S`` positions later is the same
kind and model chunk of the micro-batch ``S`` later (S = 1 without interleaving, p with it: Megatron's groups of
p micro-batches), and its dependencies are the same ops ``L`` positions later (:meth:`Schedule.steady_period`).
Cut each stage's steady run into windows of L ops ("periods"); the ops of period t + 1 depend only on periods
t + 1 - D .. t + 1 (D, the lookback, read from the graph), by the same edges as those of period t.

Exact extrapolation (max-plus homogeneity): the map from the completion times of D consecutive periods to those of
the next is monotone and commutes with adding a constant. So once periods t - D + 1 .. t equal periods
t - D .. t - 1 plus one constant c, every later steady period is the one before plus c, whatever the number of
periods. A schedule of m micro-batches is the same graph as one of m' = m - K S micro-batches with K steady periods
inserted: every op after the insertion ends K c later. So the evaluator replays (by levels, bit-identical to the
replay: :func:`simulator.schedule.fast_timeline.level_ends`) a short schedule of m' micro-batches (m' = m mod S
plus enough periods for the warm-up, the transient and the cool-down: a few p), finds the first period from which
the state repeats (each difference within ``REPEAT_RTOL`` = 1e-13 of the window's magnitude |X_t|), and adds
K c to its stage ends. Error bound: a max-plus map is non-expansive in the max norm, so a state off a true repeat
by at most e = 1e-13 |X_t| keeps each later period within e of "the one before plus c", and the K inserted
periods add at most K e; against the end (about |X_t| + K c, with |X_t| <= t c for t periods replayed) that is
at most 1e-13 t relative: below 1e-10 for the few hundred periods a short schedule has. Where the short schedule reaches no repeating
state (a transient longer than its steady run: stages whose forward + backward times nearly tie), m' is doubled,
up to m itself (then it is the level sweep of m). Its cost: O(m' v) levels of numpy calls, a function of p and
v, not of m.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.caching import memo
from simulator.plan.pipeline import stage_order_grid
from simulator.plan.schedules import Schedule, as_schedule

#: 1F1B without interleaving runs the union level sweep up to this many micro-batches per stage, its closed form
#: beyond (measured on the plan search's case (a), benchmarks/search_throughput.py: the level sweep is O(m + p)
#: numpy calls shared by every structure of a batch, the closed form O(transient) calls per structure)
LEVELS_UP_TO = 4

#: a difference of two periods counts as the constant c when within this share of the window's largest end
#: (float rounding of the sums is ~1e-16 of it; the extrapolation adds at most K times this error)
REPEAT_RTOL = 1e-13


@dataclass(frozen=True)
class Periods:
    """The steady periods of one ``(schedule, pp, vpp, m)``: ``ops[t]`` the flat op indices (stage-major) of period
    t over every stage, ``count`` periods, each op of period t + 1 depending on periods >= t + 1 - ``lookback``
    by the edges of period t shifted by one period; None from :func:`periods` where the graph has no such run."""

    ops: np.ndarray
    lookback: int
    first: int = 0
    """the earliest period the state may repeat at (the later ones all follow the repeating edges)"""


@memo(maxsize=256)
def periods(schedule: Schedule | str, pp: int, vpp: int, m: int, shift: int) -> Periods | None:
    """The steady periods (class docstring), read from the order grid and checked on the dependency graph."""
    from simulator.schedule.fast_timeline import dependencies

    backward, j, c = stage_order_grid(schedule, pp, vpp, m)
    k, span = 2 * m * vpp, 2 * vpp * shift
    if k <= span:
        return None
    same = (backward[:, span:] == backward[:, :-span]) & (j[:, span:] == j[:, :-span] + shift) \
        & (c[:, span:] == c[:, :-span])
    starts, counts = [], []
    for row in same:        # the longest run of positions that repeat span later, per stage
        edges = np.flatnonzero(np.diff(np.concatenate([[0], row.astype(np.int8), [0]])))
        if edges.size == 0:
            return None
        lengths = edges[1::2] - edges[0::2]
        best = int(np.argmax(lengths))
        starts.append(int(edges[2 * best]))
        counts.append((int(lengths[best]) + span) // span)
    count = min(counts)
    if count < 3:
        return None
    ops = np.array([[i * k + s + t * span + q for i, s in enumerate(starts) for q in range(span)]
                    for t in range(count)])
    prev, dep, _ = dependencies(schedule, pp, vpp, m)
    n = pp * k
    window = np.full(n + 1, -1, dtype=np.int64)      # op -> its period (-1: outside the steady run, or none)
    window[ops] = np.arange(count)[:, None]
    lookback = 1
    for edges in (dep.ravel(), prev.ravel()):
        src = edges[ops]                             # (periods, ops per period): each op's predecessor
        none = src == n
        if not (none[2:] == none[1:-1]).all() or not ((src[2:] - src[1:-1] == span) | none[2:]).all():
            return None     # from period 2 on, a period's edges are not the previous one's shifted by one period
        got = window[src[1:]]
        if ((got < 0) & ~none[1:]).any():
            return None     # an op of period >= 1 waits for one outside the steady run
        behind = np.arange(1, count)[:, None] - got
        lookback = max(lookback, int(behind[~none[1:]].max()))
    return Periods(ops, lookback)


def _all_ends(schedule: Schedule | str, pp: int, vpp: int, m: int, rows: np.ndarray) -> np.ndarray:
    """End of every op (flat, stage-major) for each plan: ``(pp * 2 m vpp, B)``; the level sweep of
    :func:`simulator.schedule.fast_timeline.level_ends`, the same max and + as the replay."""
    from simulator.schedule.fast_timeline import _graph

    graph = _graph(schedule, pp, vpp, m)
    table = rows.T
    done = np.zeros((graph.n + 1, rows.shape[0]))
    a = 0
    for size in graph.sizes.tolist():
        level = done[a:a + size]
        np.maximum(done[graph.prev[a:a + size]], done[graph.dep[a:a + size]], out=level)
        level += table[graph.col[a:a + size]]
        a += size
    return done[graph.position]


def _repeat(ends: np.ndarray, p: Periods) -> tuple[np.ndarray, np.ndarray]:
    """For each plan (column of ``ends``), whether its state repeats before the last period, and the constant c
    by which each period then follows the one before (module docstring)."""
    win = ends[p.ops]                                   # (periods, ops per period, B)
    diff = win[1:] - win[:-1]                           # diff[s - 1]: period s minus period s - 1
    c = diff[:, 0, :]                                   # (periods - 1, B)
    tol = REPEAT_RTOL * np.abs(win[1:]).max(axis=1)
    flat = (np.abs(diff - c[:, None, :]) <= tol[:, None, :]).all(axis=1)   # period s is s - 1 plus one constant
    same_c = np.ones_like(flat)
    same_c[1:] = np.abs(c[1:] - c[:-1]) <= tol[1:]       # ... the same constant as period s - 1's
    d = p.lookback
    bad = np.cumsum(np.concatenate([np.zeros((1, flat.shape[1]), dtype=np.int64),
                                    (~flat).astype(np.int64)]), axis=0)
    bad_c = np.cumsum(np.concatenate([np.zeros((1, flat.shape[1]), dtype=np.int64),
                                      (~same_c).astype(np.int64)]), axis=0)
    # period t (index t - 1 of diff) qualifies when periods t - d + 1 .. t repeat, with one constant
    t = np.arange(max(d, p.first), flat.shape[0])   # t - 1 < periods - 2: it repeats before the last period
    ok = (bad[t] - bad[t - d] == 0) & (bad_c[t] - bad_c[t - d + 1] == 0)
    found = ok.any(axis=0)
    first = t[np.argmax(ok, axis=0)] - 1 if t.size else np.zeros(flat.shape[1], dtype=np.int64)
    return found, c[first, np.arange(ends.shape[1])]


def first_short(schedule: Schedule, pp: int, vpp: int, m: int) -> int:
    """The micro-batches of the first short schedule :func:`steady_ends` replays (module docstring); at least m:
    it replays m itself (the level sweep), and :func:`simulator.schedule.fast_timeline.fast_timelines_many` lays
    such jobs in its union sweep instead."""
    if schedule.one_f_one_b_form and vpp == 1 and m >= pp:
        # the closed form replays nothing; below LEVELS_UP_TO x pp micro-batches its steady periods (a few numpy
        # calls each, plan by plan) cost more than the union level sweep's share (2 (m + p) levels for a batch)
        return m if m <= LEVELS_UP_TO * pp else 0
    shift = schedule.steady_period(pp, vpp)
    return m % shift + shift * max(1, -(-(pp + 6 * shift) // shift))


def steady_ends(schedule: Schedule | str, pp: int, vpp: int, m: int, durations: np.ndarray) -> np.ndarray:
    """Stage ends ``(batch, pp)`` for ``durations`` ``(batch, pp, vpp, 2)`` (module docstring); within 1e-9
    relative of the replay (a hypothesis test), flat in m."""
    sched = as_schedule(schedule)
    if sched.one_f_one_b_form and vpp == 1 and m >= pp:
        from simulator.schedule.one_f_one_b_form import one_f_one_b_ends

        return one_f_one_b_ends(m, durations)
    shift = sched.steady_period(pp, vpp)
    rows = durations.reshape(durations.shape[0], -1)
    out = np.empty((rows.shape[0], pp))
    todo = np.arange(rows.shape[0])
    short = first_short(sched, pp, vpp, m)
    k = 2 * m * vpp
    last = np.arange(1, pp + 1) * k - 1
    while todo.size:
        if short >= m:
            ends = _all_ends(sched, pp, vpp, m, rows[todo])
            out[todo] = ends[last].T
            break
        p = periods(sched, pp, vpp, short, shift)
        ends = _all_ends(sched, pp, vpp, short, rows[todo])
        found, c = (_repeat(ends, p) if p is not None else (np.zeros(todo.size, bool), None))
        if found.any():
            short_last = np.arange(1, pp + 1) * (2 * short * vpp) - 1
            extra = (m - short) // shift
            out[todo[found]] = (ends[short_last][:, found] + extra * c[found]).T
        todo = todo[~found]
        short = m % shift + shift * ((2 * short) // shift)
    return out
