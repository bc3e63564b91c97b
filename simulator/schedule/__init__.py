"""Pipeline timeline, overlap and step time: :func:`simulate_step` -> :class:`StepResult`.

Imports traffic, compute, collectives, topology, plan, model and hardware (docs/architecture.md).
"""

from simulator.plan.pipeline import stage_orders
from simulator.schedule.groups import GroupTimer, OpTiming
from simulator.schedule.result import CommRow, StepResult, TraceEvent
from simulator.schedule.step import simulate_step
from simulator.schedule.timeline import StageTimeline, run_timeline

__all__ = [
    "CommRow", "GroupTimer", "OpTiming", "StageTimeline", "StepResult", "TraceEvent",
    "run_timeline", "simulate_step", "stage_orders",
]
