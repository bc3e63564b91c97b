"""DualPipe's and DualPipeV's orders as integer columns (:class:`~simulator.plan.split_arrays.SplitColumns`) in
numpy, without :class:`~simulator.plan.dualpipe.RankOrder`: each rank's order is written as a stream of events
(an op, a receive, a send) in the repeated blocks of :mod:`simulator.plan.dualpipe`'s eight steps, then read as
:class:`RankOrder` reads it: a receive is waited for by the next op, a send is posted after the last op; every
counter (forwards and backwards per phase, receives and sends per kind and phase) is a count of earlier events of
its kind; a W runs the weight gradient of the oldest split B without one (FIFO). A test checks every column
against :meth:`Schedule.split_orders` for random (pp, m)."""

from __future__ import annotations

import numpy as np

from simulator.caching import memo
from simulator.plan.split_arrays import KIND, SplitColumns

_F, _B, _W, _FB = KIND["F"], KIND["B"], KIND["W"], KIND["FB"]
# events: (type 0 op / 1 receive / 2 send, kind, local phase, the pair's backward local phase, split)


def _op(kind: int, phase: int, split: int = 0, b_phase: int = -1) -> tuple[int, int, int, int, int]:
    return (0, kind, phase, b_phase, split)


def _recv(kind: int, phase: int) -> tuple[int, int, int, int, int]:
    return (1, kind, phase, -1, 0)


def _send(kind: int, phase: int) -> tuple[int, int, int, int, int]:
    return (2, kind, phase, -1, 0)


@memo(maxsize=64)
def _pattern(events: tuple[tuple[int, int, int, int, int], ...]) -> np.ndarray:
    """``events`` as the columns of a ``(5, E)`` array (the steps' patterns are few: made once)."""
    out = np.array(events, dtype=np.int64).reshape(-1, 5).T.copy()
    out.flags.writeable = False        # shared: _block tiles copies of it
    return out


def _block(events: list[tuple[int, int, int, int, int]], times: int = 1) -> np.ndarray:
    """``events`` repeated ``times`` times, as the columns of a ``(5, E)`` array."""
    return np.tile(_pattern(tuple(events)), (1, max(times, 0)))


def _events(big_p: int, h: int, n: int) -> np.ndarray:
    """One rank's events ``(5, E)`` (a row per field), the eight steps of
    :func:`simulator.plan.dualpipe.dual_rank` (its module docstring); each step a short pattern repeated, so the
    rows are tiled rather than listed (a pp 35 DualPipeV of 140 micro-batches has ~5 x 10^4 events)."""
    middle = h == big_p - 1
    ev = [_block([_recv(_F, 0), _op(_F, 0), _send(_F, 0)], 2 * (big_p - h - 1)), _block([_recv(_F, 0)])]  # 1, 2
    if middle:
        ev += [_block([_op(_F, 0), _send(_F, 0), _recv(_F, 0), _recv(_F, 1), _op(_F, 1), _send(_F, 1)], h),
               _block([_op(_F, 0), _send(_F, 0), _recv(_F, 0), _recv(_F, 1), _op(_F, 1)])]
    else:
        ev.append(_block([_op(_F, 0), _recv(_F, 0), _recv(_F, 1), _op(_F, 1), _send(_F, 1), _send(_F, 0)], h + 1))
    ev.append(_block([_recv(_B, 1), _op(_B, 1, 1), _send(_B, 1), _recv(_F, 1), _op(_W, 0), _op(_F, 1),   # 3
                      _send(_F, 1)], big_p - h - 1))
    back = [_recv(_F, 1), _recv(_B, 0), _op(_FB, 1, b_phase=0), _send(_F, 1), _send(_B, 0)]
    if middle:                                                                                      # 4
        ev.append(_block([_op(_F, 0), _send(_F, 1), _recv(_B, 1), _op(_B, 1), _send(_F, 0), _send(_B, 1)] + back))
    else:
        ev.append(_block([_recv(_B, 1), _op(_FB, 0, b_phase=1), _send(_F, 0), _send(_B, 1)] + back))
    pair = [_recv(_F, 0), _recv(_B, 1), _op(_FB, 0, b_phase=1), _send(_F, 0), _send(_B, 1)]
    ev.append(_block(pair + back, n - 2 * big_p + h))
    ev.append(_block([_recv(_B, 1), _op(_B, 1), _send(_B, 1)] + back, big_p - h - 1))                # 5
    # 6: h + 1 rounds of a B of each phase, split from round k = (h + 1) // 2 on: from its phase-1 B when h is odd,
    # else from its phase-0 B (so the phase-1 B's from round k + 1)
    six = _block([_recv(_B, 1), _op(_B, 1), _send(_B, 1), _recv(_B, 0), _op(_B, 0), _send(_B, 0)], h + 1)
    rounds, k = np.arange(h + 1), (h + 1) // 2
    six[4, 1::6], six[4, 4::6] = rounds >= k + (h % 2 == 0), rounds >= k
    ev += [six, _block([_op(_W, 0), _recv(_B, 0), _op(_B, 0, 1), _send(_B, 0)], big_p - h - 1),      # 7
           _block([_op(_W, 0)], h + 1)]                                                             # 8
    return np.concatenate(ev, axis=1)


def dual_columns(mirrored: bool, pp: int, m: int) -> SplitColumns:
    """DualPipe (``mirrored``: two copies, the upper half of the ranks swaps its phases) or DualPipeV: every rank's
    events at once (rank-major), each counter a count of earlier events of its kind on the same rank."""
    shapes = [(pp // 2, min(rank, pp - 1 - rank), m // 2) if mirrored else (pp, rank, m) for rank in range(pp)]
    made: dict[tuple[int, int, int], np.ndarray] = {}     # DualPipe's mirrored ranks share their events
    events = [made[s] if s in made else made.setdefault(s, _events(*s)) for s in shapes]
    sizes_e = [e.shape[1] for e in events]
    rank = np.repeat(np.arange(pp), sizes_e)
    et, kd, lp, blp, sp = np.concatenate(events, axis=1)
    first = np.concatenate(([0], np.cumsum(sizes_e)[:-1]))[rank]    # each event's rank's first

    def count(mask: np.ndarray) -> np.ndarray:
        """How many earlier events of its rank the mask holds, at every event."""
        before = np.cumsum(mask) - mask
        return before - before[first]

    flip = (rank >= pp // 2) & mirrored
    ph, bph = lp ^ flip, np.where(blp >= 0, blp ^ flip, -1)
    is_op = et == 0
    opnum = np.cumsum(is_op)                         # ops up to and including each event, over all ranks
    fwd = is_op & ((kd == _F) | (kd == _FB))
    bwd_ph = np.where(kd == _FB, bph, ph)
    bwd = is_op & ((kd == _B) | (kd == _FB))
    f_mb = np.where(ph == 0, count(fwd & (ph == 0)), count(fwd & (ph == 1)))
    b_mb = np.where(bwd_ph == 0, count(bwd & (bwd_ph == 0)), count(bwd & (bwd_ph == 1)))
    o_kind, o_ph, o_rank = kd[is_op], ph[is_op], rank[is_op]
    o_mb = np.where(o_kind == _B, b_mb[is_op], f_mb[is_op])
    o_bph = np.where(o_kind == _FB, bph[is_op], -1)
    o_bmb = np.where(o_kind == _FB, b_mb[is_op], -1)
    o_split = np.where(o_kind == _B, sp[is_op], 0)
    # a W takes the oldest split B of its rank without one: the rank's k-th W the rank's k-th split B
    w, split_b = o_kind == _W, np.flatnonzero((o_kind == _B) & (o_split == 1))
    sizes = np.bincount(o_rank, minlength=pp)
    per_rank = np.bincount(o_rank[split_b], minlength=pp)
    o_first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    w_at = np.flatnonzero(w)
    w_index = np.arange(w_at.size) - np.searchsorted(w_at, o_first[o_rank[w_at]])   # k: earlier W's of its rank
    fifo = split_b[(np.cumsum(per_rank) - per_rank)[o_rank[w_at]] + w_index]
    o_ph[w], o_mb[w] = o_ph[fifo], o_mb[fifo]
    keys = np.stack([o_kind, o_ph, o_mb, o_bph, o_bmb, o_split], axis=1)
    # F of phase 0 and B of phase 1 go up (rank + 1): received from below, sent above; the others the reverse
    up = (kd == _F) == (ph == 0)
    lanes = {}
    for kind_, sign in ((1, -1), (2, 1)):           # receives come from the far side, sends go ahead
        other = np.where(up, rank + sign, rank - sign)
        at = np.flatnonzero((et == kind_) & (other >= 0) & (other < pp))
        # each one's count of earlier ones of its rank, kind (F, B) and phase: its place in a stable sort by them
        lane = (rank[at] * 2 + kd[at]) * 2 + ph[at]
        order = np.argsort(lane, kind="stable")
        ordered = lane[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        cnt = np.empty(at.size, dtype=np.int64)
        cnt[order] = np.arange(at.size) - np.repeat(starts, np.diff(np.append(starts, at.size)))
        lanes[kind_] = (other[at] if kind_ == 1 else rank[at], kd[at], ph[at], cnt, opnum[at] - (kind_ == 2))
    total = int(sizes.sum())
    width = m + 1
    table = np.full(pp * 4 * width, total, dtype=np.int64)
    r, k, p_, c, at = lanes[2]
    table[((r * 2 + k) * 2 + p_) * width + c] = at
    r, k, p_, c, at = lanes[1]
    slot = np.arange(at.size) - np.searchsorted(at, at)
    waits = np.full((total, max(1, int(slot.max(initial=0)) + 1)), total, dtype=np.int64)
    waits[at, slot] = table[((r * 2 + k) * 2 + p_) * width + c]
    return SplitColumns(np.concatenate(([0], np.cumsum(sizes))), keys, waits)
