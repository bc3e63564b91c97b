"""Pipeline schedules as per-stage op orders, and the event timeline they produce.

Orders (Megatron-LM ``pipeline_parallel/schedules.py``; Narayanan et al., SC'21, Sec. 2.2):
- GPipe: all forwards, then all backwards.
- 1F1B: stage i runs min(p - i - 1, m) warm-up forwards, then alternates one forward and one backward, then
  drains the remaining backwards.
- Interleaved 1F1B (vpp = v > 1): micro-batch chunks in groups of p; warm-up of (p - i - 1) * 2 + (v - 1) * p
  chunks; forward chunk k runs model chunk (k // p) % v, backward chunk k runs model chunk v - 1 - (k // p) % v.

Timeline: a forward of micro-batch j on virtual stage u = c * p + i starts when stage i is free and the forward of
j on u - 1 has finished and its activations arrived (one sendrecv); a backward on u waits for the backward on
u + 1 (or, on the last virtual stage, for its own forward). The bubble is what the schedule leaves idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

Op = tuple[str, int, int]  # (kind F/B, micro-batch, model chunk)


@lru_cache(maxsize=256)
def stage_orders(schedule: str, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
    """The op order of every stage for ``schedule`` (``gpipe`` or ``1f1b``; interleaved when vpp > 1).

    Cached (sweeps ask for the same orders again and again): callers must not modify the lists."""
    m = microbatches
    if schedule == "gpipe":
        return [[("F", j, c) for j in range(m) for c in range(vpp)]
                + [("B", j, c) for j in range(m) for c in reversed(range(vpp))] for _ in range(pp)]
    if vpp == 1:
        orders = []
        for i in range(pp):
            warm = min(pp - i - 1, m)
            order: list[Op] = [("F", j, 0) for j in range(warm)]
            for j in range(m - warm):
                order += [("F", warm + j, 0), ("B", j, 0)]
            order += [("B", j, 0) for j in range(m - warm, m)]
            orders.append(order)
        return orders
    return [_interleaved(i, pp, vpp, m) for i in range(pp)]


def _chunk(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, model chunk) of the k-th forward or backward chunk (Megatron's interleaved indexing)."""
    group, within = divmod(k, pp * vpp)
    c = (k % (pp * vpp)) // pp
    j = group * pp + within % pp
    return j, c if forward else vpp - 1 - c


def _interleaved(i: int, pp: int, vpp: int, m: int) -> list[Op]:
    total = m * vpp
    warm = min((pp - i - 1) * 2 + (vpp - 1) * pp, total)
    order: list[Op] = [("F", *_chunk(k, pp, vpp, True)) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", *_chunk(warm + k, pp, vpp, True)), ("B", *_chunk(k, pp, vpp, False))]
    order += [("B", *_chunk(k, pp, vpp, False)) for k in range(total - warm, total)]
    return order


@dataclass(frozen=True)
class StageTimeline:
    """Ops of one stage with start and end times (s); ``wait_pp_s`` idle time spent waiting for a transfer in
    flight, ``wait_s`` all idle time before the stage's last op ends."""

    ops: tuple[tuple[str, int, int, float, float], ...]
    end_s: float
    busy_s: float
    wait_s: float
    wait_pp_s: float


def run_timeline(orders: list[list[Op]], fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float
                 ) -> list[StageTimeline]:
    """Event timeline of the stage orders. ``fwd_s[i][c]``/``bwd_s[i][c]``: duration of a forward/backward of
    model chunk c on stage i (one micro-batch); ``p2p_s``: one boundary sendrecv.

    Each stage runs its ops in order as soon as the op's input is there; end times live in flat lists indexed by
    (virtual stage, micro-batch), since sweeps run this loop for thousands of plans.
    """
    pp = len(orders)
    vpp = len(fwd_s[0])
    last = pp * vpp - 1
    m = sum(1 for kind, _, _ in orders[0] if kind == "F") // vpp
    end_f: list[float | None] = [None] * (pp * vpp * m)
    end_b: list[float | None] = [None] * (pp * vpp * m)
    ptr, free = [0] * pp, [0.0] * pp
    events: list[list] = [[] for _ in range(pp)]
    wait, wait_pp, busy = [0.0] * pp, [0.0] * pp, [0.0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for i in range(pp):
            order, n, t, f_i, b_i, ev = orders[i], len(orders[i]), free[i], fwd_s[i], bwd_s[i], events[i]
            k = ptr[i]
            while k < n:
                kind, j, c = order[k]
                u = c * pp + i
                if kind == "F":
                    dep = end_f[(u - 1) * m + j] if u > 0 else 0.0
                    lag = p2p_s if u > 0 else 0.0
                    dur = f_i[c]
                else:
                    dep = end_b[(u + 1) * m + j] if u < last else end_f[u * m + j]
                    lag = p2p_s if u < last else 0.0
                    dur = b_i[c]
                if dep is None:
                    break
                arrival = dep + lag
                begin = t if t > arrival else arrival
                if begin > t:
                    wait[i] += begin - t
                    wait_pp[i] += max(0.0, min(begin, arrival) - max(t, arrival - lag))
                t = begin + dur
                (end_f if kind == "F" else end_b)[u * m + j] = t
                ev.append((kind, j, c, begin, t))
                busy[i] += dur
                k += 1
            if k > ptr[i]:
                remaining -= k - ptr[i]
                ptr[i], free[i] = k, t
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked (internal error)")
    return [StageTimeline(tuple(events[i]), free[i], busy[i], wait[i], wait_pp[i]) for i in range(pp)]
