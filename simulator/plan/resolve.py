"""Resolve and validate a parallel plan in one place: derive dp and expert-dp, check every
cross-field rule of docs/interface.md / issue 4, and name the key path and every value involved when one fails."""

from __future__ import annotations

from typing import Any

from simulator.errors import UserError
from simulator.implementation.moe_backends import NCCL, MoeBackend
from simulator.implementation.moe_backends import moe_backend as backend_named
from simulator.model.spec import ModelSpec
from simulator.model.strict import build
from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.resolved import ResolvedPlan
from simulator.plan.rules import (
    check_batch,
    check_heads,
    check_model_switches,
    check_moe,
    check_recompute_modules,
    check_sequence,
    check_switches,
    derive_dp,
    parse_order,
    split_layers,
)


def resolve_plan(model: ModelSpec, parallel: dict[str, Any] | ParallelPlan, training: dict[str, Any] | TrainingConfig,
                 world_size: int, moe_backend: str | MoeBackend = NCCL) -> ResolvedPlan:
    """Validate ``parallel`` and ``training`` for ``model`` on ``world_size`` GPUs and derive what follows.

    Args:
        model: the architecture.
        parallel: docs/interface.md ``parallel:`` mapping (or a ParallelPlan).
        training: docs/interface.md ``training:`` mapping (or a TrainingConfig).
        world_size: GPUs in the job.
        moe_backend: the MoE backend (:mod:`simulator.implementation.moe_backends`), or its ``moe.backend`` name.

    Raises:
        UserError: with key path (``parallel.tp``, ``training.global_batch``...) and every value involved.
    """
    backend = backend_named(moe_backend)
    _check_world(world_size)
    plan = build(ParallelPlan, parallel if parallel is not None else {}, key_prefix="parallel")
    train = build(TrainingConfig, training if training is not None else {}, key_prefix="training")
    return finish_plan(model, plan, train, world_size, backend, batch_free_rules(model, plan, train, world_size))


def _check_world(world_size: int) -> None:
    if world_size < 1:
        raise UserError(f"the GPU count must be at least 1, got {world_size}", key_path="system.gpus")


def batch_free_rules(model: ModelSpec, plan: ParallelPlan, train: TrainingConfig, world_size: int
                     ) -> tuple[tuple[str, ...], int, list, int]:
    """The rules of :func:`resolve_plan` that do not read the micro-batch (every one but :func:`check_batch`, which
    comes last), in its order; (order, dp, notes, expert dp). The plan search keeps them per plan without its
    micro-batch (:func:`simulator.search.evaluate.resolve`)."""
    _check_world(world_size)
    check_switches(plan, train)
    order = parse_order(plan.order)
    dp = derive_dp(plan, world_size)
    notes = check_heads(model, plan)
    check_recompute_modules(model, plan)
    check_model_switches(model, train)
    check_sequence(plan, train)
    return order, dp, notes, check_moe(model, plan, train, dp)


def finish_plan(model: ModelSpec, plan: ParallelPlan, train: TrainingConfig, world_size: int, backend: MoeBackend,
                checked: tuple[tuple[str, ...], int, list, int]) -> ResolvedPlan:
    """The micro-batch's rules (:func:`check_batch`) and the resolved plan, after :func:`batch_free_rules`."""
    order, dp, notes, edp = checked
    micro = check_batch(train, dp, plan)
    stage_layers, chunks = split_layers(model, plan, model.mtp_layers if train.mode == "train" else 0)
    return ResolvedPlan(model=model, parallel=plan, training=train, world_size=world_size, dp=dp, edp=edp,
                        num_microbatches=micro, order=order, stage_layers=stage_layers, stage_chunks=chunks,
                        notes=tuple(notes), moe_backend=backend)
