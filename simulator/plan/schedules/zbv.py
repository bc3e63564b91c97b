"""ZB-V (Qi, Wan, Huang, Lin 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, Sec. 6), a split
backward (:mod:`simulator.plan.zero_bubble`): pp ranks, 2 pp stages in a V as DualPipeV (``v_shape``): rank i
runs stage i (phase 0, forward i -> i+1) and stage 2p-1-i (phase 1, forward i -> i-1); the last rank turns phase
0's output into phase 1's input, rank 0 ends the V (loss).

Order (pytorch/pytorch at 1fd7abc ``torch/distributed/pipelining/schedules.py``,
``ScheduleZBVZeroBubble._calculate_single_rank_operations``, the order torchtitan's ZBVZeroBubble runs; the
paper's Sec. 6 V-shape): 2(p-i)-1 F0; i x (F1 F0); (p-i) x (F1 B1 W1); then (F0 while any is left) B0 W0 F1 B1
W1 until every forward has run; i x (B0 B1); (p-i) x (B0 W0), the W0 of the oldest B0 without one; the
remaining W1s, then W0s. Zero bubble when F = B = W (paper Sec. 6), 1F1B's activation memory. Needs
m >= 2pp - 1 (rank 0's warm-up runs 2pp-1 forwards of its first chunk; pytorch's ``ScheduleZBVZeroBubble`` pads
fewer with empty slots, which this model does not run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from simulator.caching import memo
from simulator.plan.dualpipe import DualOp, RankOrder
from simulator.plan.schedules.split import SplitSchedule
from simulator.plan.split_arrays import SplitColumns, zbv_columns
from simulator.plan.zero_bubble import all_ranks, run_op


def _rank(pp: int, m: int, i: int) -> list[DualOp]:
    """Rank ``i``'s order (module docstring); phase 0 is the V's first chunk, 1 its second."""
    r = RankOrder(pp, i)
    for _ in range(2 * (pp - i) - 1):
        run_op(r, "F", 0)
    for _ in range(i):
        run_op(r, "F", 1)
        run_op(r, "F", 0)
    for _ in range(pp - i):
        run_op(r, "F", 1)
        run_op(r, "B", 1)
        run_op(r, "W")
    while r.f[1] < r.f[0] or r.f[0] < m:
        if r.f[0] < m:
            run_op(r, "F", 0)
        run_op(r, "B", 0)
        run_op(r, "W")
        run_op(r, "F", 1)
        run_op(r, "B", 1)
        run_op(r, "W")
    for _ in range(i):
        run_op(r, "B", 0)
        run_op(r, "B", 1)
    w0 = [w for w in r.zb if w[0] == 0]               # the cool-down's W0 follow their own B0s, oldest first
    w1 = [w for w in r.zb if w[0] == 1]
    r.zb = w0
    for _ in range(pp - i):
        run_op(r, "B", 0)
        run_op(r, "W")
    r.zb = w1 + r.zb                                  # then the W1s, then the W0s left
    while r.zb:
        run_op(r, "W")
    return r.ops


@dataclass(frozen=True)
class ZeroBubbleV(SplitSchedule):
    """ZB-V (module docstring)."""

    v_shape: ClassVar[bool] = True

    def split_orders(self, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
        return _orders(self.name, pp, microbatches)

    def split_columns(self, pp: int, microbatches: int) -> SplitColumns:
        return zbv_columns(pp, microbatches)

    def min_microbatches(self, pp: int) -> tuple[int, str]:
        return 2 * pp - 1, "2*pp-1"

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """In closed form (a test checks it against the walk of :meth:`Schedule.in_flight`): every rank holds 2p
        chunks at its peak (2p - 1 warm-up forwards, then one more before each backward), a chunk half the rank's
        layers, so p: 1F1B's rank-0 count on every rank (paper Sec. 6)."""
        return float(pp)


@memo(maxsize=256)
def _orders(name: str, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
    return all_ranks(_rank, name, pp, microbatches)


ZBV = ZeroBubbleV("zbv")
