"""DualPipeV (deepseek-ai/DualPipe at 3da1bbe, ``dualpipe/dualpipev.py``): pp ranks, 2 pp stages of one copy of
the model in a V; rank i runs stage i (forward i -> i+1) and stage 2pp-1-i (forward i -> i-1), so the model's
head, loss and MTP modules run on rank 0 beside the embedding (``v_shape``). Orders:
:func:`simulator.plan.dualpipe.dual_orders`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from simulator.plan.dual_arrays import dual_columns
from simulator.plan.dualpipe import DualOp, dual_orders
from simulator.plan.schedules.split import SplitSchedule
from simulator.plan.split_arrays import SplitColumns


@dataclass(frozen=True)
class DualPipeV(SplitSchedule):
    """Bidirectional in a V, one copy of the model (module docstring)."""

    v_shape: ClassVar[bool] = True

    def split_orders(self, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
        return dual_orders(False, pp, microbatches)

    def split_columns(self, pp: int, microbatches: int) -> SplitColumns:
        return dual_columns(False, pp, microbatches)

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """In closed form (a test checks it against the walk of :meth:`Schedule.in_flight`): 2P + 1 chunks at the
        peak as DualPipe's (:class:`simulator.plan.schedules.dualpipe.DualPipe`), P = pp and a chunk half the
        rank's layers, so (2 pp + 1) / 2; the same on every rank once m >= 2 pp."""
        return pp + 0.5


DUALPIPEV = DualPipeV("dualpipev")
