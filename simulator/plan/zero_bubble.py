"""What the Zero Bubble schedules ZB-H1 and ZB-V share (the schedule objects and their orders are
:mod:`simulator.plan.schedules.zb1p` and :mod:`simulator.plan.schedules.zbv`): their ops in the representation of
:mod:`simulator.plan.dualpipe` (:class:`~simulator.plan.dualpipe.DualOp`, built by its
:class:`~simulator.plan.dualpipe.RankOrder`), which :mod:`simulator.schedule.dual_timeline` replays.

Source: Qi, Wan, Huang, Lin 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), Sec. 2
(handcrafted schedules; Fig. 3 ZB-H1) and Sec. 6 (ZB-V). The backward is split: B computes the input gradient (it
is on the critical path and is what the previous stage waits for), W the weight gradient, which any later slot
of the same rank may run (first in first out).

An op waits for its input from the neighbouring rank (the forward's activation, the backward's output gradient)
and posts its output when it ends (a send right after the compute that produced it, not batched as DualPipe's);
B posts before its W runs. Assumed, not read from a runtime: the transfer itself is in the chunk costs, as 1F1B's.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.plan.dualpipe import DualOp, RankOrder


def run_op(r: RankOrder, kind: str, phase: int = 0) -> None:
    """An F or a split B of ``phase``'s next micro-batch, each receiving its input from and sending its output to
    the neighbouring rank along the phase's direction, or the oldest pending W."""
    if kind == "F":
        r.forward(phase)
    elif kind == "B":
        r.backward(phase, split=True)
    else:
        r.weight()


def all_ranks(build: Callable[[int, int, int], list[DualOp]], name: str, pp: int, microbatches: int
              ) -> tuple[tuple[DualOp, ...], ...]:
    """Every rank's order from ``build(pp, m, rank)``, checked to leave no weight gradient behind."""
    orders = tuple(tuple(build(pp, microbatches, i)) for i in range(pp))
    for order in orders:
        if sum(op.kind == "W" for op in order) != sum(op.kind == "B" for op in order):
            raise RuntimeError(f"{name} order left a weight gradient behind (internal error)")
    return orders
