"""DualPipe's and DualPipeV's orders as integer columns (:class:`~simulator.plan.split_arrays.SplitColumns`) in
numpy, without :class:`~simulator.plan.dualpipe.RankOrder`: each rank's order is written as a stream of events
(an op, a receive, a send) in the repeated blocks of :mod:`simulator.plan.dualpipe`'s eight steps, then read as
:class:`RankOrder` reads it: a receive is waited for by the next op, a send is posted after the last op; every
counter (forwards and backwards per phase, receives and sends per kind and phase) is a count of earlier events of
its kind; a W runs the weight gradient of the oldest split B without one (FIFO). A test checks every column
against :meth:`Schedule.split_orders` for random (pp, m)."""

from __future__ import annotations

import numpy as np

from simulator.plan.split_arrays import KIND, SplitColumns

_F, _B, _W, _FB = KIND["F"], KIND["B"], KIND["W"], KIND["FB"]
# events: (type 0 op / 1 receive / 2 send, kind, local phase, the pair's backward local phase, split)


def _op(kind: int, phase: int, split: int = 0, b_phase: int = -1) -> tuple[int, int, int, int, int]:
    return (0, kind, phase, b_phase, split)


def _recv(kind: int, phase: int) -> tuple[int, int, int, int, int]:
    return (1, kind, phase, -1, 0)


def _send(kind: int, phase: int) -> tuple[int, int, int, int, int]:
    return (2, kind, phase, -1, 0)


def _events(big_p: int, h: int, n: int) -> list[tuple[int, int, int, int, int]]:
    """One rank's events, the eight steps of :func:`simulator.plan.dualpipe.dual_rank` (its module docstring)."""
    middle = h == big_p - 1
    ev = [_recv(_F, 0), _op(_F, 0), _send(_F, 0)] * (2 * (big_p - h - 1))                           # 1
    ev += [_recv(_F, 0)]                                                                            # 2
    if middle:
        ev += [_op(_F, 0), _send(_F, 0), _recv(_F, 0), _recv(_F, 1), _op(_F, 1), _send(_F, 1)] * h
        ev += [_op(_F, 0), _send(_F, 0), _recv(_F, 0), _recv(_F, 1), _op(_F, 1)]
    else:
        ev += [_op(_F, 0), _recv(_F, 0), _recv(_F, 1), _op(_F, 1), _send(_F, 1), _send(_F, 0)] * (h + 1)
    ev += [_recv(_B, 1), _op(_B, 1, 1), _send(_B, 1), _recv(_F, 1), _op(_W, 0), _op(_F, 1),         # 3
           _send(_F, 1)] * (big_p - h - 1)
    back = [_recv(_F, 1), _recv(_B, 0), _op(_FB, 1, b_phase=0), _send(_F, 1), _send(_B, 0)]
    if middle:                                                                                      # 4
        ev += [_op(_F, 0), _send(_F, 1), _recv(_B, 1), _op(_B, 1), _send(_F, 0), _send(_B, 1)] + back
    else:
        ev += [_recv(_B, 1), _op(_FB, 0, b_phase=1), _send(_F, 0), _send(_B, 1)] + back
    pair = [_recv(_F, 0), _recv(_B, 1), _op(_FB, 0, b_phase=1), _send(_F, 0), _send(_B, 1)]
    ev += (pair + back) * (n - 2 * big_p + h)
    ev += ([_recv(_B, 1), _op(_B, 1), _send(_B, 1)] + back) * (big_p - h - 1)                       # 5
    split = 0                                                                                       # 6
    for i in range(h + 1):
        split |= i == (h + 1) // 2 and h % 2 == 1
        ev += [_recv(_B, 1), _op(_B, 1, split), _send(_B, 1)]
        split |= i == (h + 1) // 2 and h % 2 == 0
        ev += [_recv(_B, 0), _op(_B, 0, split), _send(_B, 0)]
    ev += [_op(_W, 0), _recv(_B, 0), _op(_B, 0, 1), _send(_B, 0)] * (big_p - h - 1)                  # 7
    return ev + [_op(_W, 0)] * (h + 1)                                                               # 8


def _count(mask: np.ndarray) -> np.ndarray:
    """How many earlier events the mask holds, at every event."""
    return np.cumsum(mask) - mask


def dual_columns(mirrored: bool, pp: int, m: int) -> SplitColumns:
    """DualPipe (``mirrored``: two copies, the upper half of the ranks swaps its phases) or DualPipeV."""
    keys, post, wait, sizes = [], [], [], []
    start = 0
    for rank in range(pp):
        big_p, h, n = (pp // 2, min(rank, pp - 1 - rank), m // 2) if mirrored else (pp, rank, m)
        et, kd, lp, blp, sp = np.array(_events(big_p, h, n), dtype=np.int64).T
        flip = int(mirrored and rank >= pp // 2)
        ph, bph = lp ^ flip, np.where(blp >= 0, blp ^ flip, -1)
        is_op = et == 0
        opnum = np.cumsum(is_op)                         # ops up to and including each event
        fwd = is_op & ((kd == _F) | (kd == _FB))
        bwd_ph = np.where(kd == _FB, bph, ph)
        bwd = is_op & ((kd == _B) | (kd == _FB))
        f_mb = np.where(ph == 0, _count(fwd & (ph == 0)), _count(fwd & (ph == 1)))
        b_mb = np.where(bwd_ph == 0, _count(bwd & (bwd_ph == 0)), _count(bwd & (bwd_ph == 1)))
        o_kind, o_ph = kd[is_op], ph[is_op]
        o_mb = np.where(o_kind == _B, b_mb[is_op], f_mb[is_op])
        o_bph = np.where(o_kind == _FB, bph[is_op], -1)
        o_bmb = np.where(o_kind == _FB, b_mb[is_op], -1)
        o_split = np.where(o_kind == _B, sp[is_op], 0)
        w = o_kind == _W
        fifo = np.flatnonzero((o_kind == _B) & (o_split == 1))[:int(w.sum())]
        o_ph[w], o_mb[w] = o_ph[fifo], o_mb[fifo]
        keys.append(np.stack([o_kind, o_ph, o_mb, o_bph, o_bmb, o_split], axis=1))
        # F of phase 0 and B of phase 1 go up (rank + 1): received from below, sent above; the others the reverse
        up = (kd == _F) == (ph == 0)
        for kind_, sign in ((1, -1), (2, 1)):           # receives come from the far side, sends go ahead
            other = np.where(up, rank + sign, rank - sign)
            live = (et == kind_) & (other >= 0) & (other < pp)
            cnt = np.zeros(et.size, dtype=np.int64)
            for k in (_F, _B):
                for p_ in (0, 1):
                    sel = live & (kd == k) & (ph == p_)
                    cnt[sel] = np.arange(int(sel.sum()))
            if kind_ == 1:
                wait.append((other[live], kd[live], ph[live], cnt[live], start + opnum[live]))
            else:
                post.append((np.full(int(live.sum()), rank), kd[live], ph[live], cnt[live], start + opnum[live] - 1))
        sizes.append(int(is_op.sum()))
        start += sizes[-1]
    total = start
    width = m + 1
    table = np.full(pp * 4 * width, total, dtype=np.int64)
    r, k, p_, c, at = (np.concatenate(col) for col in zip(*post, strict=True))
    table[((r * 2 + k) * 2 + p_) * width + c] = at
    r, k, p_, c, at = (np.concatenate(col) for col in zip(*wait, strict=True))
    slot = np.arange(at.size) - np.searchsorted(at, at)
    waits = np.full((total, max(1, int(slot.max(initial=0)) + 1)), total, dtype=np.int64)
    waits[at, slot] = table[((r * 2 + k) * 2 + p_) * width + c]
    return SplitColumns(np.cumsum([0] + sizes), np.concatenate(keys), waits)
