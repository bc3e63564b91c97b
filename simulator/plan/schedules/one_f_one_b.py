"""1F1B (Megatron-LM ``pipeline_parallel/schedules.py``; Narayanan et al., SC'21, Sec. 2.2): stage i runs
min(p - i - 1, m) warm-up forwards, then alternates one forward and one backward, then drains the remaining
backwards. With vpp > 1 it is interleaved 1F1B (:mod:`simulator.plan.schedules.interleaved`). ``simulate()`` and
the plan search evaluate it by its steady state, flat in micro-batches: without interleaving in closed form
around it (:func:`simulator.schedule.one_f_one_b_form.one_f_one_b_ends`), interleaved by a short schedule
replayed by levels and the repeating period extrapolated (:func:`simulator.schedule.steady.steady_ends`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from simulator.caching import memo
from simulator.plan.schedules.base import Op, Schedule
from simulator.plan.schedules.interleaved import check_interleaved_batch, interleaved_order, one_f_one_b_grid

if TYPE_CHECKING:
    from simulator.plan.config import ParallelPlan, TrainingConfig


@memo(maxsize=256)
def _orders(pp: int, vpp: int, m: int) -> list[list[Op]]:
    if vpp > 1:
        return [interleaved_order(i, pp, vpp, m) for i in range(pp)]
    orders = []
    for i in range(pp):
        warm = min(pp - i - 1, m)
        order: list[Op] = [("F", j, 0) for j in range(warm)]
        for j in range(m - warm):
            order += [("F", warm + j, 0), ("B", j, 0)]
        order += [("B", j, 0) for j in range(m - warm, m)]
        orders.append(order)
    return orders


@dataclass(frozen=True)
class OneFOneB(Schedule):
    """One forward, one backward (module docstring); interleaved when vpp > 1."""

    fast: ClassVar[str | None] = "steady"
    one_f_one_b_form: ClassVar[bool] = True
    interleaves: ClassVar[bool] = True
    searched: ClassVar[bool] = True

    def orders(self, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
        return _orders(pp, vpp, microbatches)

    def order_grid(self, pp: int, vpp: int, microbatches: int):
        return one_f_one_b_grid(pp, vpp, microbatches)

    def steady_period(self, pp: int, vpp: int) -> int:
        """1 micro-batch (F, B per stage); interleaved, Megatron's group of pp micro-batches (2 vpp pp chunks)."""
        return 1 if vpp == 1 else pp

    def in_flight(self, pp: int, vpp: int, stage: int, microbatches: int) -> float:
        """In closed form from the orders (a test checks it against the walk of :meth:`Schedule.in_flight`): the
        warm-up forwards (min(w, m v) chunks, w = p - i - 1 or 2(p - i - 1) + (v - 1)p) and then one more forward
        before the first backward when any is left, so min(w + 1, m v) / v. This is min(p - i, m) without
        interleaving and Korthikanti et al. 2023's first-stage factor p(1 + (p - 1)/(p v)) with it (Narayanan et
        al., SC'21, Sec. 2.2)."""
        warm = pp - stage - 1 if vpp == 1 else (pp - stage - 1) * 2 + (vpp - 1) * pp
        return min(warm + 1, microbatches * vpp) / vpp

    def check_batch(self, p: ParallelPlan, t: TrainingConfig, dp: int, micro: int) -> None:
        check_interleaved_batch(p.pp, p.vpp, t.global_batch, t.micro_batch, dp, micro)


ONE_F_ONE_B = OneFOneB("1f1b")
