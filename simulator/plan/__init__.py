"""Parallel plans: CONTRACT.md ``parallel:``/``training:`` configs, validation in one place, rank groups.

Imports ``simulator.model`` (and units/errors) only.
"""

from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.ranks import ALL_DIMS, grid_groups
from simulator.plan.resolve import resolve_plan
from simulator.plan.resolved import ResolvedPlan

__all__ = ["ALL_DIMS", "ParallelPlan", "ResolvedPlan", "TrainingConfig", "grid_groups", "resolve_plan"]
