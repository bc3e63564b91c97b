"""Pipeline timeline, overlap and step time: :func:`simulate_step` -> :class:`StepResult`.

Imports pricing and plan and what they build on (docs/architecture.md).
"""

from simulator.plan.pipeline import stage_orders
from simulator.schedule.result import CommRow, StepResult, TraceEvent
from simulator.schedule.step import simulate_step
from simulator.schedule.timeline import StageTimeline, run_timeline

__all__ = [
    "CommRow", "StageTimeline", "StepResult", "TraceEvent",
    "run_timeline", "simulate_step", "stage_orders",
]
