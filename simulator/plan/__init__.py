"""Parallel plans: docs/interface.md ``parallel:``/``training:`` configs, validation in one place, rank groups.

Imports ``simulator.model`` (and units/errors) only.
"""

from simulator.implementation.moe_backends import (
    MOE_BACKENDS,
    SERVING_BACKENDS,
    MoeBackend,
    moe_backend,
    serving_backend,
)
from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.params import StageParams, padded_vocab, stage_params
from simulator.plan.ranks import ALL_DIMS, grid_groups
from simulator.plan.recipe import PRECISIONS, Recipe, resolve_recipe, sharding_stage
from simulator.plan.resolve import resolve_plan
from simulator.plan.resolved import ResolvedPlan
from simulator.plan.shape import Batch, rank_shape

__all__ = [
    "ALL_DIMS", "MOE_BACKENDS", "PRECISIONS", "SERVING_BACKENDS", "Batch", "MoeBackend", "ParallelPlan", "Recipe",
    "ResolvedPlan", "StageParams", "TrainingConfig", "grid_groups", "moe_backend", "padded_vocab", "rank_shape",
    "resolve_plan", "resolve_recipe", "serving_backend", "sharding_stage", "stage_params",
]
