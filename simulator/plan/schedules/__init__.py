"""Pipeline schedules as registered objects, one file each (docs/architecture.md, "How to add a pipeline
schedule"): GPipe, 1F1B (interleaved with vpp > 1), DualPipe, DualPipeV, ZB-H1, ZB-V. Registration order is the
order names are listed in (messages, the schema, the search's default space)."""

from simulator.plan.schedules.base import Op, Schedule
from simulator.plan.schedules.dualpipe import DUALPIPE
from simulator.plan.schedules.dualpipev import DUALPIPEV
from simulator.plan.schedules.gpipe import GPIPE, GPipe
from simulator.plan.schedules.one_f_one_b import ONE_F_ONE_B, OneFOneB
from simulator.plan.schedules.registry import (
    SCHEDULES,
    ScheduleName,
    as_schedule,
    register_schedule,
    schedule_named,
    schedule_names,
    searched_schedules,
)
from simulator.plan.schedules.split import SplitSchedule
from simulator.plan.schedules.zb1p import ZB1P
from simulator.plan.schedules.zbv import ZBV

for _shipped in (ONE_F_ONE_B, GPIPE, DUALPIPE, DUALPIPEV, ZB1P, ZBV):
    register_schedule(_shipped)

__all__ = [
    "GPIPE", "ONE_F_ONE_B", "SCHEDULES", "GPipe", "OneFOneB", "Op", "Schedule", "ScheduleName", "SplitSchedule",
    "as_schedule", "register_schedule", "schedule_named", "schedule_names", "searched_schedules",
]
