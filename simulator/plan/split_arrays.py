"""The split schedules' orders (ZB-H1, ZB-V, DualPipe, DualPipeV) as columns of integers for the steady-state
graph of :mod:`simulator.schedule.split_steady`, without building :class:`~simulator.plan.dualpipe.DualOp` objects.

ZB-H1 and ZB-V are built in numpy from their closed forms (the block counts of :mod:`simulator.plan.schedules.zb1p`
and ``zbv``'s module docstrings): a rank's order is a few repeated blocks of (kind, phase); an F's or B's
micro-batch is its count among the rank's earlier ops of the same kind and phase; a W runs the weight gradient of
the split B its FIFO pops (in ZB-H1 and ZB-V's steady state the B just before it; the cool-down's twist below). An
F or B waits for its input from the neighbouring rank along its phase's direction and posts its output to the
other neighbour (none past the ends), so the waited-for key is (source rank, kind, phase, the same micro-batch).
DualPipe and DualPipeV, whose sends are batched, are :mod:`simulator.plan.dual_arrays`; a split schedule without
columns of its own has its :meth:`split_orders` read (:func:`orders_columns`). A test checks every column against :meth:`Schedule.split_orders` for random (schedule, pp, m).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.caching import memo
from simulator.plan.dualpipe import DualOp

#: kind codes of the key columns (kind, phase, mb, b_phase, b_mb, split)
KIND = {"F": 0, "B": 1, "W": 2, "FB": 3}


@dataclass(frozen=True)
class SplitColumns:
    """Every op of a schedule, rank-major (``start[r]``: rank r's first): ``keys`` ``(n, 6)`` (kind, phase, mb,
    b_phase, b_mb, split) and ``waits`` ``(n, w)``: the index of each op that posts an input it waits for, in the
    order of :attr:`DualOp.waits`, padded with n."""

    start: np.ndarray
    keys: np.ndarray
    waits: np.ndarray


def _key(rank: np.ndarray, kind: np.ndarray, phase: np.ndarray, mb: np.ndarray, m: int) -> np.ndarray:
    return ((rank * 2 + kind) * 2 + phase) * (m + 1) + mb


def _finish(ranks: list[tuple[np.ndarray, np.ndarray, np.ndarray]], pp: int, m: int) -> SplitColumns:
    """Columns of single-kind ops (F, split B, W) from each rank's (kind, phase, W's source position)."""
    sizes = [len(k) for k, _, _ in ranks]
    start = np.cumsum([0] + sizes)
    n = int(start[-1])
    kind = np.concatenate([k for k, _, _ in ranks])
    phase = np.concatenate([p for _, p, _ in ranks])
    rank = np.repeat(np.arange(pp), sizes)
    code = kind * 2 + phase                              # F0 F1 B0 B1 (W: 4, 5)
    onehot = code[:, None] == np.arange(4)
    before = np.cumsum(onehot, axis=0) - onehot          # earlier ops of each code, over all ranks
    counts = before - before[np.repeat(start[:-1], sizes)]      # ... on the op's own rank
    mb = np.where(code < 4, counts[np.arange(n), np.minimum(code, 3)], 0)
    is_w = kind == KIND["W"]
    src = np.concatenate([s + start[r] for r, (_, _, s) in enumerate(ranks)])
    mb[is_w], phase[is_w] = mb[src], phase[src]
    keys = np.stack([kind, phase, mb, np.full(n, -1), np.full(n, -1), (kind == KIND["B"]).astype(np.int64)], axis=1)
    # F of phase 0 and B of phase 1 go up (rank + 1), the others down: the input comes from the other side
    up = (kind == KIND["F"]) == (phase == 0)
    frm = np.where(up, rank - 1, rank + 1)
    to = np.where(up, rank + 1, rank - 1)
    table = np.full(pp * 4 * (m + 1), n, dtype=np.int64)
    sends = ~is_w & (to >= 0) & (to < pp)
    table[_key(rank[sends], kind[sends], phase[sends], mb[sends], m)] = np.flatnonzero(sends)
    waits = np.full((n, 1), n, dtype=np.int64)
    recv = ~is_w & (frm >= 0) & (frm < pp)
    waits[recv, 0] = table[_key(frm[recv], kind[recv], phase[recv], mb[recv], m)]
    return SplitColumns(start, keys, waits)


def _blocks(*parts: tuple[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Kind and phase columns of repeated blocks: ``(block, times)``, a block like ``"F0 B0 W"``."""
    both = np.concatenate([np.tile(_block(block), (1, max(times, 0))) for block, times in parts], axis=1)
    return both[0], both[1]


@memo(maxsize=64)
def _block(block: str) -> np.ndarray:
    """A block's (kind, phase) rows ``(2, ops)`` (the schedules' blocks are few: made once)."""
    ops = block.split()
    out = np.array([[KIND[o[0]] for o in ops], [int(o[1]) if len(o) > 1 else 0 for o in ops]], dtype=np.int64)
    out.flags.writeable = False        # shared: _blocks tiles copies of it
    return out


def _previous_b(kind: np.ndarray) -> np.ndarray:
    """Each W's source: the last B before it (the FIFO holds one B when a W runs)."""
    last = np.maximum.accumulate(np.where(kind == KIND["B"], np.arange(kind.size), -1))
    return last[kind == KIND["W"]]


def zb1p_columns(pp: int, m: int) -> SplitColumns:
    """ZB-H1 (:mod:`simulator.plan.schedules.zb1p`): F x (p-i-1), (F B) x i, (F B W) x (m-p+1), (B W) x (p-i-1),
    W x i; every W pops the oldest split B (FIFO), so the j-th W runs the j-th B's weight gradient."""
    ranks = []
    for i in range(pp):
        kind, phase = _blocks(("F0", pp - i - 1), ("F0 B0", i), ("F0 B0 W", m - pp + 1), ("B0 W", pp - i - 1),
                              ("W", i))
        ranks.append((kind, phase, np.flatnonzero(kind == KIND["B"])))
    return _finish(ranks, pp, m)


def zbv_columns(pp: int, m: int) -> SplitColumns:
    """ZB-V (:mod:`simulator.plan.schedules.zbv`): 2(p-i)-1 F0; (F1 F0) x i; (F1 B1 W) x (p-i); (F0 B0 W F1 B1 W)
    x (m-2p+i+1) and (B0 W F1 B1 W) x (p-i-1) (the loop, F0 while any is left: f1 runs from p to m); (B0 B1) x i;
    (B0 W) x (p-i); W x 2i. Until the cool-down each W follows its own B; there the cool-down's B0s
    queue after the i B0s of (B0 B1) x i, (B0 W) x (p-i) pops their first p-i, and the rest run after the i B1s."""
    ranks = []
    for i in range(pp):
        head_k, head_p = _blocks(("F0", 2 * (pp - i) - 1), ("F1 F0", i), ("F1 B1 W", pp - i),
                                 ("F0 B0 W F1 B1 W", m - 2 * pp + i + 1), ("B0 W F1 B1 W", pp - i - 1))
        a = head_k.size
        tail_k, tail_p = _blocks(("B0 B1", i), ("B0 W", pp - i), ("W", 2 * i))
        kind, phase = np.concatenate([head_k, tail_k]), np.concatenate([head_p, tail_p])
        w0 = a + 2 * np.arange(i)                       # (B0 B1) x i: B0s at even, B1s at odd places
        w1 = w0 + 1
        cool = a + 2 * i + 2 * np.arange(pp - i)        # the cool-down's B0s
        queue = np.concatenate([w0, cool])
        src = np.concatenate([_previous_b(head_k), queue[:pp - i], w1, queue[pp - i:]])
        ranks.append((kind, phase, src))
    return _finish(ranks, pp, m)


def orders_columns(orders: tuple[tuple[DualOp, ...], ...], pp: int, m: int) -> SplitColumns:
    """Columns of any split schedule's :meth:`split_orders` (the default of :meth:`SplitSchedule.split_columns`)."""
    del pp, m
    rows = [(op.kind, op.phase, op.mb, op.b_phase, op.b_mb, op.split, op.waits, op.posts)
            for order in orders for op in order]
    start = np.cumsum([0] + [len(order) for order in orders])
    n = int(start[-1])
    keys = np.array([(KIND[k], ph, mb, bp, bmb, int(split)) for k, ph, mb, bp, bmb, split, _, _ in rows],
                    dtype=np.int64).reshape(n, 6)
    kf = {"F": 0, "B": 1}
    table = {}
    for r, order in enumerate(orders):
        base = int(start[r])
        for q, op in enumerate(order):
            for k, ph, mb in op.posts:
                table[(r, kf[k], ph, mb)] = base + q
    width = max(1, max(len(row[6]) for row in rows))
    waits = np.full((n, width), n, dtype=np.int64)
    for g, row in enumerate(rows):
        for e, (src, k, ph, mb) in enumerate(row[6]):
            waits[g, e] = table[(src, kf[k], ph, mb)]
    return SplitColumns(start, keys, waits)

