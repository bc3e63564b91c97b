"""The event timeline of the pipeline's op orders (:func:`simulator.plan.pipeline.stage_orders`).

A forward of micro-batch j on virtual stage u = c * p + i starts when stage i is free and the forward of j on
u - 1 has finished and its activations arrived (one sendrecv); a backward on u waits for the backward on u + 1 (or,
on the last virtual stage, for its own forward). The bubble is what the schedule leaves idle.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.plan.pipeline import Op


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
