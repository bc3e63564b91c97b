"""ZB-H1 (Qi, Wan, Huang, Lin 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, Sec. 2, Fig. 3;
sail-sg/zero-bubble-pipeline-parallelism README at commit 39f2c186: the ZB-H1 quick-start patch of 1F1B), a
split backward (:mod:`simulator.plan.zero_bubble`).

pp ranks, one stage each (phase 0 only, forward i -> i+1), rank i of p, m micro-batches: (p-i-1) F; i x (F B);
(m-p+1) x (F B W); (p-i-1) x (B W); i x W. 1F1B's order with rank i's first i weight gradients deferred to its
cool-down, where 1F1B idles; the first worker runs as 1F1B (paper Sec. 2.1: the W passes start later by the
warm-up count, so every rank has p micro-batches in flight, rank 0 none of them W-only). Bubble (p-1)(F + B - W)
against 1F1B's (p-1)(F + B + W), B + W the full backward (paper Sec. 2.1). Needs m >= pp (its steady F B W
section runs m-pp+1 times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from simulator.caching import memo
from simulator.plan.dualpipe import DualOp, RankOrder
from simulator.plan.schedules.split import SplitSchedule
from simulator.plan.split_arrays import SplitColumns, zb1p_columns
from simulator.plan.zero_bubble import all_ranks, run_op


def _rank(pp: int, m: int, i: int) -> list[DualOp]:
    """Rank ``i``'s order (module docstring)."""
    r = RankOrder(pp, i)
    steps = ([("F",)] * (pp - i - 1) + [("F", "B")] * i + [("F", "B", "W")] * (m - pp + 1)
             + [("B", "W")] * (pp - i - 1) + [("W",)] * i)
    for step in steps:
        for kind in step:
            run_op(r, kind)
    return r.ops


@dataclass(frozen=True)
class ZeroBubbleH1(SplitSchedule):
    """ZB-H1 (module docstring)."""

    chunks: ClassVar[str] = "one chunk per rank (1F1B's)"

    def split_orders(self, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
        return _orders(self.name, pp, microbatches)

    def split_columns(self, pp: int, microbatches: int) -> SplitColumns:
        return zb1p_columns(pp, microbatches)

    def min_microbatches(self, pp: int) -> tuple[int, str]:
        return pp, "pp"

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """1F1B's min(p - i, m), in closed form (a test checks it against the walk of :meth:`Schedule.in_flight`):
        the same warm-up and the same alternation of F and B (the deferred W changes only when a weight gradient
        runs). Not counted: the inputs and output gradients a deferred W still reads (its GEMMs' operands, less
        than the B's activations: paper Table 1), up to i micro-batches on rank i, none on rank 0."""
        return float(min(pp - stage, microbatches))


@memo(maxsize=256)
def _orders(name: str, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
    return all_ranks(_rank, name, pp, microbatches)


ZB1P = ZeroBubbleH1("zb1p")
