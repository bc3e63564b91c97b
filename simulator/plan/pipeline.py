"""Pipeline orders and in-flight counts by schedule, name or object: the functions the engine and the tests call,
each a thin call of the registered schedule's method (:mod:`simulator.plan.schedules`, one file per schedule:
GPipe, 1F1B and interleaved 1F1B, DualPipe, DualPipeV, ZB-H1, ZB-V). The step engine replays the orders as a
timeline (:mod:`simulator.schedule.timeline`, :mod:`simulator.schedule.dual_timeline`) and memory derives the
micro-batches a stage holds at once from them (:func:`in_flight`).
"""

from __future__ import annotations

from simulator.plan.dualpipe import DualOp
from simulator.plan.schedules import Op, Schedule, as_schedule
from simulator.plan.schedules.base import Schedule as _Base

__all__ = ["Op", "in_flight", "in_flight_walk", "split_orders", "stage_order_arrays", "stage_order_grid",
           "stage_orders"]


def stage_orders(schedule: Schedule | str, pp: int, vpp: int, microbatches: int) -> list[list[Op]]:
    """The op order of every stage of a schedule of whole backwards (:meth:`Schedule.orders`; GPipe, 1F1B,
    interleaved when vpp > 1). Cached: callers must not modify the lists. The schedules that split the backward
    have orders of their own (:func:`split_orders`)."""
    return as_schedule(schedule).orders(pp, vpp, microbatches)


def split_orders(schedule: Schedule | str, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
    """The op order of every rank of a schedule that splits the backward (:meth:`Schedule.split_orders`)."""
    return as_schedule(schedule).split_orders(pp, microbatches)


def stage_order_grid(schedule: Schedule | str, pp: int, vpp: int, microbatches: int):
    """:func:`stage_orders` as three ``(pp, 2 m vpp)`` integer arrays (:meth:`Schedule.order_grid`): ``backward``
    (0/1), micro-batch and model chunk of each stage's q-th op (the plan search's level timeline reads them)."""
    return as_schedule(schedule).order_grid(pp, vpp, microbatches)


def stage_order_arrays(schedule: Schedule | str, pp: int, vpp: int, microbatches: int) -> list[tuple]:
    """:func:`stage_order_grid` per stage, ``(backward, micro-batch, chunk)`` (a test keeps them equal to the
    orders)."""
    backward, j, c = stage_order_grid(schedule, pp, vpp, microbatches)
    return [(backward[i], j[i], c[i]) for i in range(pp)]


def in_flight(schedule: Schedule | str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """Micro-batches of this stage's layers held at once (:meth:`Schedule.in_flight`: a closed form for every
    shipped schedule, a test checks each against :func:`in_flight_walk`)."""
    return as_schedule(schedule).in_flight(pp, vpp, stage, microbatches)


def in_flight_walk(schedule: Schedule | str, pp: int, vpp: int, stage: int, microbatches: int) -> float:
    """:func:`in_flight` by walking the stage's op order (the reference the closed forms are tested against):
    forwards run minus backwards done, in chunks (:meth:`Schedule.in_flight` of the base class)."""
    return _Base.in_flight(as_schedule(schedule), pp, vpp, stage, microbatches)
