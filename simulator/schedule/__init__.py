"""Pipeline timeline, overlap and step time: :func:`simulate_step` -> :class:`StepResult`.

Imports traffic, compute, collectives, topology, plan, model and hardware (DESIGN.md data flow).
"""

from simulator.schedule.groups import GroupTimer, OpTiming
from simulator.schedule.pipeline import StageTimeline, run_timeline, stage_orders
from simulator.schedule.result import CommRow, StepResult, TraceEvent
from simulator.schedule.step import simulate_step

__all__ = [
    "CommRow", "GroupTimer", "OpTiming", "StageTimeline", "StepResult", "TraceEvent",
    "run_timeline", "simulate_step", "stage_orders",
]
