"""Where a run's wall time goes, in expectation (docs/whole_run.md, "Time").

With productive time ``T`` (steps x step time), a checkpoint every ``tau`` productive seconds stalling ``delta``,
failures at rate ``lambda`` (exponential), each costing a restart ``R`` and the work since the last durable
checkpoint ``L``:

    W = T + (T / tau) delta + lambda W (R + L)   =>   W = (T + T delta / tau) / (1 - lambda (R + L))

``L = (tau + delta) / 2 + lag``: a failure falls uniformly in a checkpoint period, and an async save is durable
``lag = write - stall`` after training resumes (Young 1974; Daly 2006 Section 2 derive the same first-order
terms). Goodput = T / W; expected interruptions = lambda W.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import UserError


@dataclass(frozen=True)
class TimeBreakdown:
    """A run's wall time by part, seconds, and its expected interruptions."""

    productive_s: float
    checkpoint_s: float
    lost_s: float
    restart_s: float
    interruptions: float

    @property
    def wall_s(self) -> float:
        return self.productive_s + self.checkpoint_s + self.lost_s + self.restart_s

    @property
    def goodput(self) -> float:
        """Productive step time over wall time (docs/interface.md ``run.goodput``)."""
        return self.productive_s / self.wall_s


def lost_work_s(interval_s: float, stall_s: float, lag_s: float = 0.0) -> float:
    """Expected work lost to one failure: half a checkpoint period plus the durability lag of an async save."""
    return (interval_s + stall_s) / 2.0 + lag_s


def expected_time(productive_s: float, interval_s: float, stall_s: float, rate_per_s: float, restart_s: float,
                  lag_s: float = 0.0) -> TimeBreakdown:
    """The module docstring's expectation. Raises a UserError when failures come faster than the run can recover
    (``lambda (R + L) >= 1``: the job never finishes)."""
    lost = lost_work_s(interval_s, stall_s, lag_s)
    load = rate_per_s * (restart_s + lost)
    if load >= 1.0:
        raise UserError(f"the job never finishes: failures every {1 / rate_per_s:.0f} s on average but each costs "
                        f"{restart_s:.0f} s of restart and {lost:.0f} s of lost work (lambda (R + L) = {load:.2f} >= 1)",
                        key_path="run.failures")
    checkpoint = productive_s / interval_s * stall_s
    wall = (productive_s + checkpoint) / (1.0 - load)
    failures = rate_per_s * wall
    return TimeBreakdown(productive_s, checkpoint, failures * lost, failures * restart_s, failures)
