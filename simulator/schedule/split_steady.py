"""Rank end times of the schedules that split the backward (DualPipe, DualPipeV, ZB-H1, ZB-V) without the
replay, flat in micro-batches: :mod:`simulator.schedule.steady`'s extrapolation on the graph of their F, B, W and
F&B orders.

The replay (:func:`simulator.schedule.dual_timeline.run_dual_timeline`) starts an op when its rank is free and
every input it waits for has been posted (by the op after which its sender posts it), so an op ends at
``max(end of the previous op on its rank, ends of its posters) + its seconds``: the same max-plus recurrence as
1F1B's, with up to two data dependencies per op (an overlapped F&B pair waits for a forward and a backward). Its
orders repeat in the steady state: on rank i the op ``L_i`` positions later is the same kind and phase for the
next micro-batch of each phase (``mb`` + 1; m grows by ``Schedule.steady_period``: 2 for DualPipe, whose phases
carry m/2 each, else 1). Each rank's steady run is cut into periods of L_i ops; the periods of the ranks are
aligned (an offset per rank, found by Bellman-Ford on the cross-rank edges, so that no op waits for a later
period) and the graph is checked to repeat period by period. Then a short schedule of m' micro-batches is
replayed by levels (the replay's max and + on the same operands), the first period from which the state repeats
(every op of D consecutive periods the previous one plus one c) is found, and the ends of m are those of m' plus
K c, K = (m - m') / S steady periods inserted; busy and hidden seconds add K periods' worth. Where no period
repeats, m' doubles, up to m (then the level sweep of m itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.arrays import distinct
from simulator.caching import memo
from simulator.plan.schedules import Schedule
from simulator.plan.split_arrays import KIND
from simulator.schedule.dual_timeline import PhaseCosts
from simulator.schedule.steady import Periods, _repeat
from simulator.schedule.timeline import StageTimeline

#: columns of a rank's duration row: F0 F1, B0 B1, split B0 B1, W0 W1, F&B (fp, bp) 00 01 10 11 (F: phase, B:
#: 2 + 2 split + phase, W: 6 + phase, F&B: 8 + 2 fp + bp)
NCOL = 12


def duration_rows(costs: list[PhaseCosts], interference: float) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the seconds of each column (``(pp, NCOL)``, as the replay's ``_duration``) and the EP seconds an
    op of that column hides (non-zero for F&B pairs only)."""
    dur, hid = np.zeros((len(costs), NCOL)), np.zeros((len(costs), NCOL))
    for r, c in enumerate(costs):
        for ph in (0, 1):
            dur[r, ph], dur[r, 2 + ph], dur[r, 4 + ph], dur[r, 6 + ph] = c.f[ph], c.b[ph], c.b[ph] - c.w[ph], c.w[ph]
        for fp in (0, 1):
            for bp in (0, 1):
                save = c.pair_saving(fp, bp, interference)
                dur[r, 8 + 2 * fp + bp], hid[r, 8 + 2 * fp + bp] = c.f[fp] + c.b[bp] - save, save
    return dur, hid


@dataclass(frozen=True)
class SplitGraph:
    """One ``(schedule, pp, m)``'s ops (rank-major numbering, ``start[r]`` rank r's first): each op's
    predecessors (``edges``: the previous op on its rank, then its posters; ``n``: none), duration column
    (``rank * NCOL + column``) and key (kind, phase, mb, b_phase, b_mb, split); and the same in level order
    (``by_level``: predecessors as level positions, columns, ops per level; ``position``: op -> level position)."""

    n: int
    start: np.ndarray
    edges: np.ndarray
    col: np.ndarray
    keys: np.ndarray
    by_level: tuple[np.ndarray, np.ndarray, list[int]]
    position: np.ndarray
    rank_sweeps: bool = False
    """whether :func:`all_ends` sweeps rank by rank (:func:`_swept_ends`) rather than level by level: where the
    levels settled in one downward and one upward sweep (ZB-H1, ZB-V), so the ends settle in a few"""


def _levels(edges: np.ndarray, start: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Longest chain of predecessors of every op (its level), by rank sweeps in numpy, as
    :func:`simulator.schedule.fast_timeline.sweep_levels` (its docstring has the argument): on rank i, with
    ``a_g`` = 1 + the largest level of op g's posters (0 without), L[g] = max(L[g - 1] + 1, a_g) is
    g + a running maximum of a_g - g. The ranks are swept downwards, then upwards, each recomputed from the current
    levels, until a sweep changes nothing: from below every level, a fixed point of the recurrence, which on a DAG
    is its one solution (the levels of the walk each rank advancing while its next op's posters have one). Also
    returns how many sweeps changed something."""
    level = np.full(n + 1, -1, dtype=np.int64)
    cross = edges[:, 1:]
    bounds = list(zip(start[:-1].tolist(), start[1:].tolist(), strict=True))
    position = np.arange(n) - np.repeat(start[:-1], np.diff(start))
    sweep = 0
    while True:
        changed = False
        for lo, hi in bounds if sweep % 2 == 0 else bounds[::-1]:
            row = level[cross[lo:hi]].max(axis=1) + 1 - position[lo:hi]
            np.maximum.accumulate(row, out=row)
            row += position[lo:hi]
            if changed or (row != level[lo:hi]).any():
                level[lo:hi] = row
                changed = True
        if not changed:
            return level[:n], sweep
        sweep += 1
        if sweep > n:        # each sweep settles at least one more op of every path: only a cycle gets here
            raise RuntimeError("split pipeline schedule deadlocked (internal error)")


@memo(maxsize=64)
def split_graph(schedule: Schedule, pp: int, m: int) -> SplitGraph:
    cols = schedule.split_columns(pp, m)
    start, keys = cols.start, cols.keys
    n = int(start[-1])
    edges = np.empty((n, 1 + cols.waits.shape[1]), dtype=np.int64)
    edges[:, 0] = np.arange(-1, n - 1)
    edges[start[:-1], 0] = n
    edges[:, 1:] = cols.waits
    kind, phase = keys[:, 0], keys[:, 1]
    column = np.select([kind == KIND["F"], kind == KIND["B"], kind == KIND["W"]],
                       [phase, 2 + 2 * keys[:, 5] + phase, 6 + phase], 8 + 2 * phase + keys[:, 3])
    col = np.repeat(np.arange(pp), np.diff(start)) * NCOL + column
    level, sweeps = _levels(edges, start, n)
    order = np.argsort(level, kind="stable")
    position = np.empty(n + 1, dtype=np.int64)
    position[order], position[n] = np.arange(n), n
    return SplitGraph(n, start, edges, col, keys, (position[edges[order]], col[order], np.bincount(level).tolist()),
                      position[:n], sweeps <= 1)


def all_ends(graph: SplitGraph, table: np.ndarray) -> np.ndarray:
    """End of every op ``(n,)`` for ``table`` ``(pp * NCOL,)`` of seconds, level by level (the replay's max and
    + on the same operands: the maximum of its predecessors' ends is exact in any order, so the ends are the
    replay's bit for bit), or where the graph's levels settle in two rank sweeps, rank by rank
    (:func:`_swept_ends`)."""
    if graph.rank_sweeps:
        return _swept_ends(graph, table)
    edges, col, sizes = graph.by_level
    seconds = table[col]
    done = np.zeros(graph.n + 1)
    a = 0
    for size in sizes:
        b = a + size
        done[a:b] = done[edges[a:b]].max(axis=1) + seconds[a:b]
        a = b
    return done[graph.position]


def _swept_ends(graph: SplitGraph, table: np.ndarray) -> np.ndarray:
    """:func:`all_ends` by rank sweeps, as :func:`_levels` finds the levels: on a rank, with a_g the latest end of op
    g's posters on other ranks (0 without) and S_g its seconds, E_g = max(E_(g-1), a_g) + S_g is
    P_g + max over k <= g of (a_k - P_(k-1)), P the rank's running sum of seconds: one running maximum. The ranks
    are swept downwards, then upwards, each from the current ends of the others, until a sweep changes nothing: from
    below the ends, the fixed point of the recurrence, its one solution on a DAG. The running sums round differently
    from the replay's one addition per op (within ~1e-14 relative; the hypothesis test holds every end within
    1e-9). ZB-V's pp 35 x 140 graph (29,400 ops, 874 levels) settles in 3 sweeps: 1.2 ms instead of 3.0 ms; DualPipeV's
    levels take 4 sweeps and its ends 7, slower than its 454 levels, so it keeps the level sweep."""
    seconds = table[graph.col]
    ends = np.zeros(graph.n + 1)                   # the last: the 0 of a missing poster
    ranks = []
    for lo, hi in zip(graph.start[:-1].tolist(), graph.start[1:].tolist(), strict=True):
        after = np.cumsum(seconds[lo:hi])
        ranks.append((lo, hi, after, after - seconds[lo:hi], graph.edges[lo:hi, 1:]))
    for sweep in range(graph.n + 1):
        changed = False
        for lo, hi, after, before, cross in ranks if sweep % 2 == 0 else ranks[::-1]:
            row = ends[cross].max(axis=1) - before
            np.maximum.accumulate(row, out=row)
            row += after
            if changed or (row != ends[lo:hi]).any():
                ends[lo:hi] = row
                changed = True
        if not changed:
            return ends[:graph.n]
    raise RuntimeError("split pipeline schedule deadlocked (internal error)")     # pragma: no cover


def _runs(keys: np.ndarray, start: np.ndarray) -> list[tuple[int, int, int] | None]:
    """Every rank's steady run: (first position on the rank, ops per period L, periods), the L in 1..NCOL whose
    repeats (the op L later on the same rank is the same one for the next micro-batch of each phase) cover the
    most positions (the smallest such L, the first longest run of it), None without one; all ranks at once, one
    pass per L over the rank-major ops (the positions whose op L later is on the next rank are left out, so no
    run crosses a rank)."""
    n, pp = keys.shape[0], start.shape[0] - 1
    rank = np.repeat(np.arange(pp), np.diff(start))
    room = start[1:][rank] - np.arange(n)                 # ops from each one to its rank's end
    best = np.zeros((3, pp), dtype=np.int64)              # length (0: none yet), first position, L
    # each key as one integer in mixed radix (each column shifted to start at 0, with room for its value + 1):
    # one op is the next micro-batch's of another iff its code is the other's plus the mb (and F&B b_mb) weights
    low = keys.min(axis=0, initial=0)
    radix = (keys.max(axis=0, initial=0) - low + 2).tolist()
    weight = [int(np.prod(radix[j + 1:], dtype=object)) for j in range(len(radix))]
    if weight[0] * radix[0] >= 2**62:
        raise OverflowError("split schedule keys too wide for one integer (internal error)")
    code = (keys - low) @ np.array(weight, dtype=np.int64)
    step = weight[2] + weight[4] * (keys[:, 0] == KIND["FB"])
    ahead = code + step
    for span in range(1, NCOL + 1):
        same = np.zeros(n + 1, dtype=np.int8)
        same[1:n + 1 - span] = (code[span:] == ahead[:-span]) & (room[:-span] > span)
        edge = np.diff(same, append=np.int8(0))
        first, length = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
        if first.size == 0:
            continue
        length -= first
        owner = rank[first]
        order = np.lexsort((first, -length, owner))      # per rank: the longest run, the first of them
        lead = order[np.flatnonzero(np.diff(owner[order], prepend=-1))]
        r = owner[lead]
        better = length[lead] > best[0, r]
        r, lead = r[better], lead[better]
        best[0, r], best[1, r], best[2, r] = length[lead], first[lead] - start[r], span
    return [None if length == 0 else (first, span, (length + span) // span)
            for length, first, span in best.T.tolist()]


@memo(maxsize=64)
def split_periods(schedule: Schedule, pp: int, m: int) -> Periods | None:
    """The aligned steady periods of a split schedule (module docstring), or None where its graph has none."""
    g = split_graph(schedule, pp, m)
    n = g.n
    runs = _runs(g.keys, g.start)
    if any(r is None or r[2] < 3 for r in runs):
        return None
    raw = np.full(n + 1, -1, dtype=np.int64)          # op -> its rank's period (-1: outside the steady run)
    rank = np.full(n + 1, -1, dtype=np.int64)
    for i, (first, span, count) in enumerate(runs):
        at = g.start[i] + first + np.arange(span * count)
        raw[at], rank[at] = np.arange(span * count) // span, i
    dst = np.flatnonzero(raw[:n] >= 1)
    src = g.edges[dst]
    inside = (src != n) & (raw[src] >= 0)
    into = np.broadcast_to(dst[:, None], src.shape)[inside]
    gap = raw[into] - raw[src[inside]]
    low_gap = int(gap.min(initial=0))
    wide = int(gap.max(initial=0)) - low_gap + 1
    code = distinct((rank[into] * pp + rank[src[inside]]) * wide + gap - low_gap)   # lexicographic, as the rows
    pairs = np.stack([code // wide // pp, code // wide % pp, code % wide + low_gap], axis=1).tolist()
    # (waiting rank, posting rank, periods between them)
    offset = [0] * pp                                  # o_src <= o_dst + (t_dst - t_src): no op waits ahead
    for _ in range(pp + 1):
        changed = False
        for d, s_, w in pairs:
            if offset[s_] > offset[d] + w:
                offset[s_], changed = offset[d] + w, True
        if not changed:
            break
    else:
        return None
    low = max(offset)
    high = min(o + r[2] for o, r in zip(offset, runs, strict=True))
    if high - low < 4:
        return None
    span_of = np.array([r[1] for r in runs])
    lane = np.repeat(np.arange(pp), span_of)                       # the rank of each op of a period
    within = np.arange(lane.size) - np.repeat(np.cumsum(span_of) - span_of, span_of)
    base = g.start[:-1] + np.array([r[0] for r in runs]) - np.array(offset) * span_of
    ops = base[lane] + within + np.arange(low, high)[:, None] * span_of[lane]   # period s's ops, s = low.. high-1
    aligned = np.full(n + 1, -1, dtype=np.int64)
    aligned[ops] = np.arange(high - low)[:, None]
    # every period s >= 1 against the one before: the same edges shifted by one period, none into a later period
    # or outside the run; first_ok is one past the last period that fails, the lookback the farthest an edge of a
    # passing period reaches back
    src, before = g.edges[ops[1:]], g.edges[ops[:-1]]
    none = src == n
    spans = span_of[rank[np.where(none, ops[1:, :, None], src)]]
    got = aligned[src]
    s = np.arange(1, high - low)[:, None, None]
    ok = ((none == (before == n)).all(axis=(1, 2)) & ((src - before == spans) | none).all(axis=(1, 2))
          & ~((got < 0) & ~none).any(axis=(1, 2)) & ~((got > s) & ~none).any(axis=(1, 2)))
    bad = np.flatnonzero(~ok)
    first_ok = int(bad[-1]) + 2 if bad.size else 1
    lookback = max(1, int(np.where(none, 0, s - got).max(axis=(1, 2))[ok].max(initial=1)))
    if first_ok >= high - low - 1:
        return None
    return Periods(ops, lookback, first_ok)


def split_timelines(schedule: Schedule, pp: int, m: int, costs: list[PhaseCosts], interference: float
                    ) -> list[StageTimeline]:
    """Every rank's end, busy and hidden seconds (no op list) without the replay (module docstring)."""
    dur, hid = duration_rows(costs, interference)
    return list(_rank_timelines(schedule, pp, m, dur.tobytes(), hid.tobytes()))


@memo(maxsize=256)
def _rank_timelines(schedule: Schedule, pp: int, m: int, dur_bytes: bytes, hid_bytes: bytes
                    ) -> tuple[StageTimeline, ...]:
    """:func:`split_timelines` of the duration and hidden-seconds rows (:func:`duration_rows`, as bytes): plans of
    a search whose ranks' op seconds are the same (they differ in what only the step's tails read: the sharding's
    per-step collectives, the optimizer's offload) share one evaluation.

    A short schedule is swept only while it holds at most half of m, doubling while no period repeats: a sweep
    costs its levels (~2 m' + p), so beyond half of m the sweep of m itself costs less than a short sweep that
    finds no repeat followed by it, and needs no extrapolation."""
    dur = np.frombuffer(dur_bytes).reshape(pp, NCOL)
    hid = np.frombuffer(hid_bytes).reshape(pp, NCOL)
    table = dur.ravel()
    shift = schedule.steady_period(pp, 1)
    need = schedule.min_microbatches(pp)[0] + pp + 6 * shift
    short = m % shift + shift * -(-need // shift)
    while 2 * short <= m:
        p = split_periods(schedule, pp, short)
        if p is not None:
            g = split_graph(schedule, pp, short)
            ends = all_ends(g, table)
            found, c = _repeat(ends[:, None], p)
            if found[0]:
                k = (m - short) // shift
                window = p.ops[0]
                return _timelines(g, dur, hid, ends, k * c[0], k, window)
        short = m % shift + shift * (2 * (short // shift))
    g = split_graph(schedule, pp, m)
    return _timelines(g, dur, hid, all_ends(g, table), 0.0, 0, np.zeros(0, dtype=np.int64))


def _timelines(g: SplitGraph, dur: np.ndarray, hid: np.ndarray, ends: np.ndarray, added: float, k: int,
               window: np.ndarray) -> tuple[StageTimeline, ...]:
    """Rank timelines from the short schedule's op ends, ``added`` seconds on every end and ``k`` more periods
    (one of them ``window``'s ops) of busy and hidden seconds."""
    flat_d, flat_h = dur.ravel(), hid.ravel()
    ranks = g.col // NCOL
    pp = len(g.start) - 1
    busy = np.bincount(ranks, weights=flat_d[g.col], minlength=pp)
    hidden = np.bincount(ranks, weights=flat_h[g.col], minlength=pp)
    if k:
        busy += k * np.bincount(ranks[window], weights=flat_d[g.col[window]], minlength=pp)
        hidden += k * np.bincount(ranks[window], weights=flat_h[g.col[window]], minlength=pp)
    out = []
    for i in range(pp):
        end = float(ends[g.start[i + 1] - 1] + added)
        out.append(StageTimeline((), end, float(busy[i]), end - float(busy[i]), 0.0, float(hidden[i])))
    return tuple(out)
