"""The event timeline of the pipeline's op orders (:func:`simulator.plan.pipeline.stage_orders`).

A forward of micro-batch j on virtual stage u = c * p + i starts when stage i is free and the forward of j on
u - 1 has finished and its activations arrived (one sendrecv); a backward on u waits for the backward on u + 1 (or,
on the last virtual stage, for its own forward). The bubble is what the schedule leaves idle.

Micro-batch overlap of expert-parallel communication (``pair_hiding``; Megatron-Core
``--overlap-moe-expert-parallel-comm``, the 1F1B A2A overlap, and the overlapped forward/backward chunk pairs of
DeepSeek's DualPipe): a forward and a backward of different micro-batches that a stage runs back to back are
merged, so the dispatch/combine of each hides behind the other's compute. The pair takes
``hidden = min(ep_a, compute_b) + min(ep_b, compute_a)`` less time, minus the share ``interference`` of the hidden
time by which the communication kernels still slow the compute (the engine-wide overlap rule,
:func:`simulator.pricing.overlap.exposed`). Each op joins at most one pair; warm-up and cool-down ops stay alone.
"""

from __future__ import annotations

from collections.abc import Callable
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
    pair_hidden_s: float = 0.0


@dataclass(frozen=True)
class PairHiding:
    """What micro-batch overlap may hide (module docstring): per stage and chunk, the exposed EP seconds and the
    compute seconds of a forward and of a backward, and the interference share of hidden time."""

    ep_f: list[list[float]]
    ep_b: list[list[float]]
    comp_f: list[list[float]]
    comp_b: list[list[float]]
    interference: float

    def saving(self, i: int, prev: tuple[str, int, int], kind: str, c: int) -> float:
        """Seconds the op (kind, chunk c) saves when merged with the stage's previous op ``prev``."""
        pk, pj, pc = prev
        if pk == kind:
            return 0.0
        ep_a, comp_a = (self.ep_f[i][pc], self.comp_f[i][pc]) if pk == "F" else (self.ep_b[i][pc], self.comp_b[i][pc])
        ep_b, comp_b = (self.ep_f[i][c], self.comp_f[i][c]) if kind == "F" else (self.ep_b[i][c], self.comp_b[i][c])
        hidden = min(ep_a, comp_b) + min(ep_b, comp_a)
        return hidden * (1.0 - self.interference)


def run_timeline(orders: list[list[Op]], fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float,
                 pair_hiding: PairHiding | None = None) -> list[StageTimeline]:
    """Event timeline of the stage orders. ``fwd_s[i][c]``/``bwd_s[i][c]``: duration of a forward/backward of
    model chunk c on stage i (one micro-batch); ``p2p_s``: one boundary sendrecv; ``pair_hiding``: micro-batch
    overlap of EP communication (module docstring).

    Each stage runs its ops in order as soon as the op's input is there; end times live in flat lists indexed by
    (virtual stage, micro-batch), since sweeps run this loop for thousands of plans.
    """
    pp = len(orders)
    vpp = len(fwd_s[0])
    last = pp * vpp - 1
    m = sum(1 for kind, _, _ in orders[0] if kind == "F") // vpp
    end_f: list[float | None] = [None] * (pp * vpp * m)
    end_b: list[float | None] = [None] * (pp * vpp * m)
    free = [0.0] * pp
    events: list[list] = [[] for _ in range(pp)]
    wait, wait_pp, busy, hidden = [0.0] * pp, [0.0] * pp, [0.0] * pp, [0.0] * pp
    paired: list[set[int]] = [set() for _ in range(pp)]

    def advance(i: int, k: int) -> int:
        order, n, t, f_i, b_i, ev = orders[i], len(orders[i]), free[i], fwd_s[i], bwd_s[i], events[i]
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
            if pair_hiding is not None and k > 0 and k - 1 not in paired[i] and order[k - 1][1] != j:
                save = pair_hiding.saving(i, order[k - 1], kind, c)
                if save > 0:
                    paired[i].update((k - 1, k))
                    dur -= save
                    hidden[i] += save
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
        free[i] = t
        return k

    run_in_turn([len(o) for o in orders], advance, "pipeline schedule")
    return [StageTimeline(tuple(events[i]), free[i], busy[i], wait[i], wait_pp[i], hidden[i]) for i in range(pp)]


def run_in_turn(lengths: list[int], advance: Callable[[int, int], int], what: str) -> None:
    """Visit the ranks in turn until every op of every rank has run: ``advance(i, k)`` runs rank i's ops from its
    k-th on, as far as their inputs are there, and returns the index of its first op not run. A full turn in which
    no rank runs an op is a deadlock of the orders (an internal error)."""
    ptr = [0] * len(lengths)
    remaining = sum(lengths)
    while remaining:
        progressed = False
        for i, k in enumerate(ptr):
            done = advance(i, k)
            if done > k:
                remaining -= done - k
                ptr[i] = done
                progressed = True
        if not progressed:
            raise RuntimeError(f"{what} deadlocked (internal error)")
