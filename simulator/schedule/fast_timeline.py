"""Stage end times of a pipeline schedule without the event replay, for many plans at once.

:func:`simulator.schedule.timeline.run_timeline` is the reference: it replays every op in Python, so its cost grows
with micro-batches x stages x virtual stages (137 ms for the 1T model's 512 x 64 ops). The step engine calls it
with zero transfer lag (pipeline sends are part of the chunk costs), so the completion time of an op is the
longest path to it in the schedule's dependency graph:

    C(x) = max(C(previous op on x's stage), C(x's data dependency)) + d(x)

where the data dependency of a forward of micro-batch j on virtual stage u is the forward of j on u - 1, and of a
backward the backward of j on u + 1 (the own forward on the last virtual stage). Two evaluators of that recurrence:

- :func:`gpipe_ends` (closed form, exact): GPipe is two flow shops of identical jobs. The forward of micro-batch j
  on stage i ends at ``F(i, j) = sum_{l<=i} f_l + j max_{l<=i} f_l`` (a monotone lattice path through rows 0..i
  visits every row once and spends its j extra cells in the slowest row). The backwards start on stage k at
  ``r_k = F(k, m-1)`` and flow upwards, so stage i ends at
  ``E_i = max_{k>=i} [r_k + sum_{l=i..k} b_l + (m-1) max_{l=i..k} b_l]``. O(p^2) per plan, independent of m.
- :func:`level_ends` (1F1B and interleaved 1F1B, exact): the same recurrence evaluated level by level, where a
  level holds the ops whose longest chain of predecessors has the same length (found by stage sweeps in numpy,
  :func:`sweep_levels`); every op of a level is independent of the others, so a level is one numpy
  gather-max-add over all its ops and over every plan of the batch. :func:`level_ends_many` lays the graphs of
  several structures side by side (their disjoint union), so one sweep of max(levels) steps evaluates them all.
  Maximum and addition of the same operands in the same order as the replay: the ends are bit-identical to
  :func:`run_timeline`'s. The cost is O(levels) numpy calls (about 2(m + p)v levels) per batch of structures.

Both return ``end[b, i]`` (seconds) for plan b and stage i; busy time is ``m * sum_c (f_ic + b_ic)`` and, with
zero lag, no time is spent waiting for a transfer in flight.

Since issue 30, 1F1B and interleaved 1F1B are "steady" schedules (:mod:`simulator.schedule.one_f_one_b_form`,
:mod:`simulator.schedule.steady`, docs/pipeline_timelines.md): flat in micro-batches. The level sweep evaluates
their short schedules, and a steady job whose short schedule is not much shorter than its own (small m) joins
the union sweep of :func:`fast_timelines_many` directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.caching import memo
from simulator.plan.pipeline import stage_order_grid
from simulator.plan.schedules import Schedule, as_schedule
from simulator.schedule.timeline import StageTimeline


@dataclass(frozen=True)
class _Graph:
    """The dependency graph of one (schedule, pp, vpp, m), its ops in level order: each op's two predecessors as
    positions in that order (``n``: none, a constant 0) and the column of its duration in a flattened
    ``(pp, vpp, 2)`` duration array; ``sizes`` the number of ops of each level (a level is a slice of these
    arrays), ``last`` the position of every stage's last op and ``position`` every op's (stage-major)."""

    n: int
    prev: np.ndarray
    dep: np.ndarray
    col: np.ndarray
    sizes: np.ndarray
    last: np.ndarray
    position: np.ndarray


@memo(maxsize=256)
def _graph(schedule: Schedule | str, pp: int, vpp: int, m: int) -> _Graph:
    prev, dep, dur = dependencies(schedule, pp, vpp, m)
    n, k = dep.size, dep.shape[1]
    lv = sweep_levels(dep, n)
    order = np.argsort(lv, kind="stable")
    position = np.empty(n + 1, dtype=np.int64)      # op -> its position in level order (n -> n: none)
    position[order] = np.arange(n)
    position[n] = n
    return _Graph(n, position[prev.ravel()[order]], position[dep.ravel()[order]], dur.ravel()[order],
                  np.bincount(lv), position[np.arange(1, pp + 1) * k - 1], position[:n])


def dependencies(schedule: Schedule | str, pp: int, vpp: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pp, 2 m vpp)`` grids (every stage runs m vpp forwards and as many backwards), ops numbered stage-major:
    each op's previous op on its stage and its data dependency (flat op indices; ``pp * 2 m vpp``: none), and the
    column of its duration in a flattened ``(pp, vpp, 2)`` duration array."""
    backward, j, c = stage_order_grid(schedule, pp, vpp, m)
    k = 2 * m * vpp
    n, last_u = pp * k, pp * vpp - 1
    stage = np.arange(pp)[:, None]
    u = c * pp + stage
    ops = np.arange(n).reshape(pp, k)
    key = u * m + j
    index = np.zeros(2 * pp * vpp * m + 1, dtype=np.int64)     # [backward * pp vpp m + u m + j] -> op; [-1]: none
    index[backward * (pp * vpp * m) + key] = ops
    index[-1] = n
    prev = ops - 1
    prev[:, 0] = n
    # forward: u - 1's forward, none on u = 0; backward: u + 1's backward, the own forward on the last u
    at = np.where(backward == 0, np.where(u > 0, key - m, -1),
                  np.where(u < last_u, pp * vpp * m + key + m, key))
    return prev, index[at], (stage * vpp + c) * 2 + backward


def sweep_levels(dep: np.ndarray, n: int) -> np.ndarray:
    """Length of the longest chain of predecessors of every op (its level), by stage sweeps in numpy.

    ``dep``: ``(pp, k)`` the data dependency of each op (a flat op index; ``n``: none), ops numbered stage-major.
    On one stage the level is L[g] = max(L[g - 1], L[dep g]) + 1, so with a_g = L[dep g] + 1 - g it is
    g + max_{g' <= g} a_g': a running maximum, one numpy call per stage given the levels of the dependencies.
    The stages are swept downwards, then upwards, and again, each row recomputed from the current levels,
    until a sweep changes nothing. Starting below every level (-1), each update is a lower bound of the true
    levels that grows, and a sweep that changes nothing is a fixed point of the recurrence, which on a DAG has one
    solution: the levels (equal to :func:`levels_walk`'s, a test checks). A forward dependency points to the
    stage above, a backward one to the stage below, so a sweep follows a path as long as it keeps its direction;
    pipeline schedules take 3 or 4 sweeps, the last changing nothing (pp 2-128, vpp 1-8, m up to 512; 64 stages x
    2 chunks x 512 micro-batches: its whole graph in ~40 ms against ~90 ms with the walk, measured once here).
    """
    pp, k = dep.shape
    level = np.full(n + 1, -1, dtype=np.int64)
    grid = level[:n].reshape(pp, k)              # a view: rows written here are read through ``level``
    position = np.arange(k)
    offset = 1 - position
    row = np.empty(k, dtype=np.int64)
    down, up = range(pp), range(pp - 1, -1, -1)
    sweep = 0
    while True:
        changed = False
        for i in down if sweep % 2 == 0 else up:
            level.take(dep[i], out=row)             # row = position + running max of L[dep] + 1 - position
            row += offset
            np.maximum.accumulate(row, out=row)
            row += position
            if changed or (row != grid[i]).any():
                grid[i] = row
                changed = True
        if not changed:
            return level[:n]
        sweep += 1
        if sweep > n:        # each sweep settles at least one more op of every path: only a cycle gets here
            raise RuntimeError("pipeline schedule deadlocked (internal error)")


def levels_walk(dep: list[int], k: int, n: int) -> list[int]:
    """The levels of :func:`sweep_levels` by the replay's own walk over stages (the reference it is tested
    against): each stage advances while its next op's data dependency is done; its previous op, the one before it
    on the stage, always is, and its level is carried along as ``cur`` (-1 before a stage's first op)."""
    level = [-2] * (n + 1)
    level[n] = -1
    ptr, ends = list(range(0, n, k)), list(range(k, n + 1, k))
    last = [-1] * len(ptr)
    stages = range(len(ptr))
    remaining = n
    while remaining:
        progressed = False
        for i in stages:
            g = start = ptr[i]
            end, cur = ends[i], last[i]
            while g < end:
                b = level[dep[g]]
                if b == -2:
                    break
                cur = (cur if cur > b else b) + 1
                level[g] = cur
                g += 1
            if g > start:
                remaining -= g - start
                ptr[i], last[i] = g, cur
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked (internal error)")
    return level[:n]


def level_ends(schedule: Schedule | str, pp: int, vpp: int, m: int, durations: np.ndarray) -> np.ndarray:
    """End of every stage's last op for a batch of plans of one structure.

    Args:
        durations: ``(batch, pp, vpp, 2)`` seconds of a forward ([..., 0]) and backward ([..., 1]) of each chunk.

    Returns:
        ``(batch, pp)`` end seconds, bit-identical to :func:`run_timeline` with zero lag.
    """
    return level_ends_many([(schedule, pp, vpp, m, durations)])[0]


def level_ends_many(jobs: list[tuple[Schedule | str, int, int, int, np.ndarray]]) -> list[np.ndarray]:
    """:func:`level_ends` of several structures at once, ``jobs`` of ``(schedule, pp, vpp, m, durations)``.

    The graphs are laid side by side as one graph (their disjoint union): level l of the union is level l of
    each, so one sweep of max(levels) numpy steps evaluates all of them, instead of one sweep per structure (a
    level costs ~10 us of numpy calls however few ops it has). Every op of the union is one row of a
    ``(ops + 1, B)`` array (row 0: the constant 0 of a missing predecessor), the rows ordered by level, and within
    a level by job and op; its B columns are the plans of its job. Identical duration rows of one job (plans that
    differ only in what does not reach the chunk costs) are evaluated once; B is the most distinct rows of any
    job, and a job with fewer fills its remaining columns with copies of its last row (computed, then dropped).
    The index arrays are per op, not per (op, plan), and a level's durations are gathered from a small table of
    every job's (stage, chunk, direction) rows rather than laid out per op. Each (op, plan) gets the same maximum
    and addition of the same operands as in the replay.
    """
    parts = []
    for schedule, pp, vpp, m, durations in jobs:
        graph = _graph(schedule, pp, vpp, m)
        flat = durations.reshape(durations.shape[0], -1)
        seen: dict[bytes, int] = {}     # identical rows (bit for bit) once: the first of each, in order
        inverse = np.array([seen.setdefault(row.tobytes(), len(seen)) for row in flat])
        parts.append((graph, flat[np.unique(inverse, return_index=True)[1]], inverse))
    width = max(rows.shape[0] for _, rows, _ in parts)
    depth = max(len(g.sizes) for g, *_ in parts)
    counts = np.zeros((len(parts), depth), dtype=np.int64)      # ops of each job at each level
    for i, (graph, *_) in enumerate(parts):
        counts[i, :len(graph.sizes)] = graph.sizes
    starts = np.concatenate([[0], np.cumsum(counts.sum(axis=0))])   # each level's first row in the union
    within = np.cumsum(counts, axis=0) - counts                      # a job's offset inside each level
    size = int(starts[-1])
    # every job's durations as rows of one small table: row (the job's first row + column of its flattened
    # (pp, vpp, 2) durations), its B columns the job's distinct plans (padded with the last)
    table = np.concatenate([rows[np.minimum(np.arange(width), rows.shape[0] - 1)].T for _, rows, _ in parts])
    first = np.cumsum([0] + [rows.shape[1] for _, rows, _ in parts])
    prev, dep, col = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    where = []
    for i, (graph, _, _) in enumerate(parts):
        levels = len(graph.sizes)
        # the union row (1-based) of the job's ops in level order: its level's first row in the union, the job's
        # offset inside that level, then its position inside the job's part of the level; none (op n) is row 0
        to = np.empty(graph.n + 1, dtype=np.int64)
        to[:-1] = np.repeat(starts[:levels] + within[i, :levels] + 1 - (np.cumsum(graph.sizes) - graph.sizes),
                            graph.sizes) + np.arange(graph.n)
        to[-1] = 0
        prev[to[:-1] - 1] = to[graph.prev]
        dep[to[:-1] - 1] = to[graph.dep]
        col[to[:-1] - 1] = graph.col + first[i]
        where.append(to[graph.last])
    done = np.zeros((size + 1, width))  # done[1 + r]: end of row r of the union's level order; done[0] = 0
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        level = done[a + 1:b + 1]       # a view: written in place
        np.maximum(done[prev[a:b]], done[dep[a:b]], out=level)
        level += table[col[a:b]]
    return [done[at][:, :rows.shape[0]].T[inverse] for at, (_, rows, inverse) in zip(where, parts, strict=True)]


def gpipe_ends(m: int, durations: np.ndarray) -> np.ndarray:
    """GPipe stage ends in closed form (module docstring); ``durations`` ``(batch, pp, 1, 2)``. Every (i, k >= i)
    term at once: sum_{l=i..k} b_l from prefix sums, max_{l=i..k} b_l by a running maximum along k."""
    f, b = durations[:, :, 0, 0], durations[:, :, 0, 1]
    release = np.cumsum(f, axis=1) + (m - 1) * np.maximum.accumulate(f, axis=1)   # F(k, m-1)
    pp = f.shape[1]
    prefix = np.zeros((b.shape[0], pp + 1))
    prefix[:, 1:] = np.cumsum(b, axis=1)
    upper = np.triu(np.ones((pp, pp), dtype=bool))                                # [i, k]: k >= i
    # max b_{i..k}: the stages before i filled with 0, below every duration (none is negative)
    span_max = np.maximum.accumulate(np.where(upper, b[:, None, :], 0.0), axis=2)
    total = release[:, None, :] + prefix[:, None, 1:] - prefix[:, :pp, None] + (m - 1) * span_max
    return np.where(upper, total, -np.inf).max(axis=2)


#: the plan search's ``timeline`` column for each ``Schedule.fast`` kind
FAST_LABELS = {"closed_form": "closed form", "steady": "steady state", "levels": "levels"}


def fast_timelines(schedule: Schedule | str, pp: int, vpp: int, m: int, durations: np.ndarray
                   ) -> list[list[StageTimeline]]:
    """Stage timelines (no op list) of a batch of plans of one structure, by the schedule's ``fast`` kind:
    "closed_form" (GPipe) by :func:`gpipe_ends`, "steady" (1F1B and interleaved 1F1B) by
    :func:`simulator.schedule.steady.steady_ends`, "levels" by :func:`level_ends`. ``durations``:
    ``(batch, pp, vpp, 2)``."""
    return fast_timelines_many([(schedule, pp, vpp, m, durations)])[0]


def fast_timelines_many(jobs: list[tuple[Schedule | str, int, int, int, np.ndarray]]
                        ) -> list[list[list[StageTimeline]]]:
    """:func:`fast_timelines` of several structures, ``jobs`` of ``(schedule, pp, vpp, m, durations)``: the
    "levels" ones in one sweep (:func:`level_ends_many`)."""
    from simulator.schedule.steady import first_short, steady_ends

    kinds = [as_schedule(job[0]).fast for job in jobs]
    # a steady job whose short schedule is not much shorter (under half) joins the union level sweep, whose
    # levels the batch's other structures pay for anyway
    kinds = ["levels" if kind == "steady" and 2 * first_short(as_schedule(s), pp, vpp, m) >= m else kind
             for kind, (s, pp, vpp, m, _) in zip(kinds, jobs, strict=True)]
    levels = [job for job, kind in zip(jobs, kinds, strict=True) if kind == "levels"]
    by_levels = iter(level_ends_many(levels) if levels else [])
    out = []
    for (schedule, pp, vpp, m, durations), kind in zip(jobs, kinds, strict=True):
        if kind == "closed_form":
            ends = gpipe_ends(m, durations)
        elif kind == "steady":
            ends = steady_ends(schedule, pp, vpp, m, durations)
        else:
            ends = next(by_levels)
        busy = m * durations.sum(axis=(2, 3))
        out.append([[StageTimeline((), e, u, e - u, 0.0) for e, u in zip(ends_b, busy_b, strict=True)]
                    for ends_b, busy_b in zip(ends.tolist(), busy.tolist(), strict=True)])
    return out
