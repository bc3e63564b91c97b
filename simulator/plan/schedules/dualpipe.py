"""DualPipe (deepseek-ai/DualPipe at 3da1bbe, ``dualpipe/dualpipe.py``; DeepSeek-V3 Technical Report, arXiv
2412.19437, Sec. 3.2.1): pp ranks, two copies of the model; half the micro-batches enter at rank 0, half at rank
pp-1, and rank i runs stage i of one copy and stage pp-1-i of the other (``mirrored``: its parameters are both
stages', ``simulator.plan.params.stage_params``; the copies all-reduce their gradients). Orders:
:func:`simulator.plan.dualpipe.dual_orders`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from simulator.errors import UserError
from simulator.plan.dual_arrays import dual_columns
from simulator.plan.dualpipe import DualOp, dual_orders
from simulator.plan.schedules.split import SplitSchedule, count_text
from simulator.plan.split_arrays import SplitColumns

if TYPE_CHECKING:
    from simulator.plan.config import ParallelPlan, TrainingConfig


@dataclass(frozen=True)
class DualPipe(SplitSchedule):
    """Bidirectional, two copies of the model (module docstring)."""

    mirrored: ClassVar[bool] = True

    def split_orders(self, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
        return dual_orders(True, pp, microbatches)

    def split_columns(self, pp: int, microbatches: int) -> SplitColumns:
        return dual_columns(True, pp, microbatches)

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """Micro-batches of rank ``stage``'s layers (``ResolvedPlan.stage_layers``, L/pp layers) held at once, in
        closed form (a test checks it against the walk of :meth:`Schedule.in_flight`): every rank has run 2P
        forward chunks when its first backward starts and the steady pairs start a forward before their backward
        frees, so 2P + 1 chunks: the README's "PP + 1" activations per device (deepseek-ai/DualPipe README, commit
        3da1bbe). P = pp/2 and a chunk is one stage of L/pp layers, so pp + 1 (the stage's layers stand for both of
        the rank's stages, equal but for the first and last). The same on every rank once m >= 2 pp."""
        return pp + 1.0

    def check_ranks(self, p: ParallelPlan) -> None:
        if p.pp % 2:
            raise UserError(f"schedule {self.name} pairs rank i with rank pp-1-i: pp must be even, got pp = {p.pp}",
                            key_path="parallel.pp")

    def check_batch(self, p: ParallelPlan, t: TrainingConfig, dp: int, micro: int) -> None:
        super().check_batch(p, t, dp, micro)
        if micro % 2:
            raise UserError(f"schedule {self.name} sends half the micro-batches each way: {count_text(t, dp, micro)} "
                            "must be even", key_path="training.global_batch")


DUALPIPE = DualPipe("dualpipe")
