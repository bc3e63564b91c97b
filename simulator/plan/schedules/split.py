"""What the schedules that split the backward share (DualPipe, DualPipeV, ZB-H1, ZB-V): F, B, W (and F&B) orders
per rank, replayed by :mod:`simulator.schedule.dual_timeline`, and their plan rules.

Rules (deepseek-ai/DualPipe at 3da1bbe, ``step()``; Qi et al. 2024, arXiv 2401.10241, Sec. 2 and 6): a pipeline
of at least two ranks; training only (they split a backward); no interleaving (vpp 1: the V schedules bring their
own two chunks per rank, ZB-H1 is 1F1B's single chunk); at least :meth:`SplitSchedule.min_microbatches`
micro-batches per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from simulator.errors import UserError
from simulator.plan.schedules.base import Schedule
from simulator.plan.split_arrays import SplitColumns, orders_columns

if TYPE_CHECKING:
    from simulator.plan.config import ParallelPlan, TrainingConfig


def count_text(t: TrainingConfig, dp: int, micro: int) -> str:
    """How the micro-batch count follows from the batch, for rule messages."""
    return (f"the micro-batch count global_batch ({t.global_batch}) / (micro_batch ({t.micro_batch}) * dp "
            f"({dp})) = {micro}")


@dataclass(frozen=True)
class SplitSchedule(Schedule):
    """A schedule of F, B, W ops per rank (module docstring)."""

    replay: ClassVar[str] = "split"
    fast: ClassVar[str | None] = "steady"
    chunks: ClassVar[str] = "its own two chunks per rank"
    """what a rank runs, for the vpp rule's message"""

    def steady_period(self, pp: int, vpp: int) -> int:
        """One micro-batch of each phase per period: 2 with two copies of the model (each phase carries m/2),
        else 1 (:mod:`simulator.schedule.split_steady`)."""
        return 2 if self.mirrored else 1

    def split_columns(self, pp: int, microbatches: int) -> SplitColumns:
        """Every rank's order as integer columns (:mod:`simulator.plan.split_arrays`) for the steady-state graph;
        the same ops as :meth:`split_orders` (tested); this default reads them off :meth:`split_orders`, the
        shipped schedules build them directly."""
        return orders_columns(self.split_orders(pp, microbatches), pp, microbatches)

    def min_microbatches(self, pp: int) -> tuple[int, str]:
        """The fewest micro-batches per step the order is defined for, and its formula in pp."""
        return 2 * pp, "2*pp"

    def check_plan(self, p: ParallelPlan, t: TrainingConfig) -> None:
        if t.mode != "train":
            raise UserError(f"schedule {p.schedule} is a training schedule (forward and backward chunks); "
                            f"training.mode {t.mode} runs no backward: use 1f1b", key_path="parallel.schedule")
        if p.pp < 2:
            raise UserError(f"schedule {p.schedule} needs a pipeline: pp >= 2, got pp = {p.pp}",
                            key_path="parallel.pp")
        self.check_ranks(p)
        if p.vpp != 1:
            raise UserError(f"schedule {p.schedule} runs {self.chunks}: vpp must be 1, got vpp = {p.vpp}",
                            key_path="parallel.vpp")

    def check_ranks(self, p: ParallelPlan) -> None:
        """A rule on the pipeline size beyond pp >= 2 (none here)."""
        del p

    def check_batch(self, p: ParallelPlan, t: TrainingConfig, dp: int, micro: int) -> None:
        need, formula = self.min_microbatches(p.pp)
        if micro < need:
            raise UserError(f"schedule {p.schedule} needs at least {formula} = {need} micro-batches; "
                            f"{count_text(t, dp, micro)}", key_path="training.global_batch")
