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
  level holds the ops whose longest chain of predecessors has the same length; every op of a level is independent
  of the others, so a level is one numpy gather-max-add over all its ops and over every plan of the batch (plans
  of one ``(schedule, pp, vpp, m)`` share the graph). Maximum and addition of the same operands in the same order
  as the replay: the ends are bit-identical to :func:`run_timeline`'s. The cost per batch is O(levels) numpy
  calls (about 2(m + p)v levels), shared by the batch.

Both return ``end[b, i]`` (seconds) for plan b and stage i; busy time is ``m * sum_c (f_ic + b_ic)`` and, with
zero lag, no time is spent waiting for a transfer in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simulator.plan.pipeline import stage_order_arrays
from simulator.schedule.timeline import StageTimeline


@dataclass(frozen=True)
class _Graph:
    """The dependency graph of one (schedule, pp, vpp, m): the ops sorted by level, their two predecessors (index
    ``n`` is a constant 0) and the column of their duration in a ``(pp, vpp, 2)`` duration array, in the same
    order; ``bounds`` the (start, end) of each level in them (a level is a slice: a view, not a copy)."""

    n: int
    ops: np.ndarray
    prev: np.ndarray
    dep: np.ndarray
    col: np.ndarray
    bounds: tuple[tuple[int, int], ...]
    last: np.ndarray
    """index of every stage's last op"""


@lru_cache(maxsize=256)
def _graph(schedule: str, pp: int, vpp: int, m: int) -> _Graph:
    orders = stage_order_arrays(schedule, pp, vpp, m)
    sizes = [len(b) for b, _, _ in orders]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n, last_u = int(offsets[-1]), pp * vpp - 1
    stage = np.repeat(np.arange(pp), sizes)
    backward = np.concatenate([b for b, _, _ in orders])
    j = np.concatenate([x for _, x, _ in orders])
    c = np.concatenate([x for _, _, x in orders])
    u = c * pp + stage
    ops = np.arange(n)
    index = np.zeros((2, pp * vpp * m), dtype=np.int64)     # [backward, u * m + j] -> op
    index[backward, u * m + j] = ops
    prev = ops - 1
    prev[offsets[:-1]] = n
    dep = np.where(backward == 0,
                   np.where(u > 0, index[0, np.maximum(u - 1, 0) * m + j], n),
                   np.where(u < last_u, index[1, np.minimum(u + 1, last_u) * m + j], index[0, u * m + j]))
    dur = (stage * vpp + c) * 2 + backward
    lv = np.array(_levels(offsets.tolist(), dep.tolist(), n)[:n])
    order = np.argsort(lv, kind="stable")
    bounds = np.searchsorted(lv[order], np.arange(lv.max() + 2)).tolist()
    return _Graph(n, order, prev[order], dep[order], dur[order], tuple(zip(bounds[:-1], bounds[1:], strict=True)),
                  offsets[1:] - 1)


def _levels(offsets: list[int], dep: list[int], n: int) -> list[int]:
    """Length of the longest chain of predecessors of every op, found in the replay's own sweep over stages (each
    stage advances while its next op's data dependency is done; its previous op, the one before it on the stage,
    always is, and its level is carried along as ``cur``: -1 before a stage's first op)."""
    level = [-2] * (n + 1)
    level[n] = -1
    ptr, ends = offsets[:-1], offsets[1:]
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
    return level


def level_ends(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray) -> np.ndarray:
    """End of every stage's last op for a batch of plans of one structure.

    Args:
        durations: ``(batch, pp, vpp, 2)`` seconds of a forward ([..., 0]) and backward ([..., 1]) of each chunk.

    Returns:
        ``(batch, pp)`` end seconds, bit-identical to :func:`run_timeline` with zero lag.
    """
    graph = _graph(schedule, pp, vpp, m)
    batch = durations.shape[0]
    d = np.ascontiguousarray(durations.reshape(batch, pp * vpp * 2).T)   # op-major: a level gathers whole rows
    done = np.zeros((graph.n + 1, batch))
    ops, prev, dep = graph.ops, graph.prev, graph.dep
    dur = d[graph.col]                  # every op's durations in level order: a level reads a slice (a view)
    for a, b in graph.bounds:
        x = np.maximum(done[prev[a:b]], done[dep[a:b]])
        x += dur[a:b]
        done[ops[a:b]] = x
    return done[graph.last].T


def gpipe_ends(m: int, durations: np.ndarray) -> np.ndarray:
    """GPipe stage ends in closed form (module docstring); ``durations`` ``(batch, pp, 1, 2)``."""
    f, b = durations[:, :, 0, 0], durations[:, :, 0, 1]
    release = np.cumsum(f, axis=1) + (m - 1) * np.maximum.accumulate(f, axis=1)   # F(k, m-1)
    pp = f.shape[1]
    ends = np.empty_like(f)
    for i in range(pp):
        seg = b[:, i:]
        total = release[:, i:] + np.cumsum(seg, axis=1) + (m - 1) * np.maximum.accumulate(seg, axis=1)
        ends[:, i] = total.max(axis=1)
    return ends


def fast_timelines(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray) -> list[list[StageTimeline]]:
    """Stage timelines (no op list) of a batch of plans of one structure: GPipe in closed form, 1F1B and
    interleaved 1F1B by levels. ``durations``: ``(batch, pp, vpp, 2)``."""
    ends = gpipe_ends(m, durations) if schedule == "gpipe" else level_ends(schedule, pp, vpp, m, durations)
    busy = m * durations.sum(axis=(2, 3))
    return [[StageTimeline((), e, u, e - u, 0.0) for e, u in zip(ends_b, busy_b, strict=True)]
            for ends_b, busy_b in zip(ends.tolist(), busy.tolist(), strict=True)]
