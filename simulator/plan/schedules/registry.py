"""The registered pipeline schedules: ``parallel.schedule`` (and ``search.schedule``) take any name registered
here, and :attr:`simulator.plan.resolved.ResolvedPlan.schedule` is its object. The shipped schedules register in
:mod:`simulator.plan.schedules`; a new one is one file and one :func:`register_schedule` call."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from simulator.plan.schedules.base import Schedule

SCHEDULES: dict[str, Schedule] = {}
"""Every registered schedule by name, in registration order."""


def register_schedule(schedule: Schedule) -> Schedule:
    """Register ``schedule`` under its name (a second object under a taken name is refused) and return it."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"register_schedule takes a Schedule, got {type(schedule).__name__}")
    held = SCHEDULES.get(schedule.name)
    if held is not None and held != schedule:
        raise ValueError(f"schedule name {schedule.name!r} is already registered to {held!r}")
    SCHEDULES[schedule.name] = schedule
    return schedule


def schedule_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(SCHEDULES)


def schedule_named(name: str) -> Schedule:
    """The registered schedule ``name``; an unknown name is a ValueError listing the registered ones."""
    found = SCHEDULES.get(name)
    if found is None:
        raise ValueError(f"unknown pipeline schedule {name!r}; registered: {', '.join(SCHEDULES)}")
    return found


def as_schedule(schedule: Schedule | str) -> Schedule:
    """``schedule`` itself, or the registered schedule of that name."""
    return schedule if isinstance(schedule, Schedule) else schedule_named(schedule)


def searched_schedules() -> tuple[str, ...]:
    """The names the plan search tries when ``search.schedule`` is null (``Schedule.searched``)."""
    return tuple(name for name, s in SCHEDULES.items() if s.searched)


def _check_name(name: str) -> str:
    schedule_named(name)
    return name


class _Registered:
    """The JSON schema of a registered name: the names registered when the schema is generated."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(SCHEDULES)}


ScheduleName = Annotated[str, AfterValidator(_check_name), _Registered]
"""A registered schedule's name, as a pydantic field type."""
