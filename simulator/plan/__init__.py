"""Parallel plans: CONTRACT.md ``parallel:``/``training:`` configs, validation in one place, rank groups.

Imports ``simulator.model`` (and units/errors) only.
"""

from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.params import StageParams, padded_vocab, sharding_stage, stage_params
from simulator.plan.ranks import ALL_DIMS, grid_groups
from simulator.plan.resolve import resolve_plan
from simulator.plan.resolved import ResolvedPlan

__all__ = [
    "ALL_DIMS", "ParallelPlan", "ResolvedPlan", "StageParams", "TrainingConfig", "grid_groups", "padded_vocab",
    "resolve_plan", "sharding_stage", "stage_params",
]
