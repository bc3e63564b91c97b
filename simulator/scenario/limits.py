"""Scenario rules checked before any work: sizes the engine cannot replay in bounded time (simulator.limits) and
inputs the model cannot mean (a sequence longer than a learned position table)."""

from __future__ import annotations

from simulator.errors import UserError
from simulator.hardware import NodeSpec
from simulator.implementation.serving import ServingConfig
from simulator.limits import MAX_EXPERTS, MAX_GPUS, MAX_LAYERS, MAX_NODES, MAX_TIMELINE_OPS
from simulator.model import ModelSpec
from simulator.plan import ResolvedPlan, TrainingConfig


def check_gpu_count(nodes: int, node: NodeSpec) -> None:
    """At most :data:`MAX_NODES` nodes and :data:`MAX_GPUS` GPUs (``system.nodes`` x GPUs per node)."""
    if nodes > MAX_NODES:
        raise UserError(f"{nodes:,} nodes; the simulator models at most {MAX_NODES:,} (docs/errors.md)",
                        key_path="system.nodes")
    if nodes * node.gpus > MAX_GPUS:
        raise UserError(f"{nodes:,} nodes x {node.gpus} GPUs = {nodes * node.gpus:,} GPUs; the simulator models at "
                        f"most {MAX_GPUS:,} GPUs (docs/errors.md)", key_path="system.nodes")


def check_inputs(model: ModelSpec, training: TrainingConfig, serving: ServingConfig | None = None) -> None:
    """At most :data:`MAX_LAYERS` layers; a model with learned absolute positions has ``max_position`` rows: it
    cannot embed a longer sequence (with ``serving``, its ``input_len + output_len``, blamed on ``serving.input_len``
    where the user wrote it)."""
    if model.layers > MAX_LAYERS:
        raise UserError(f"{model.layers:,} layers; the simulator models at most {MAX_LAYERS:,} (docs/errors.md)",
                        key_path="model.layers")
    if model.moe is not None and model.moe.experts > MAX_EXPERTS:
        raise UserError(f"{model.moe.experts:,} experts; the simulator models at most {MAX_EXPERTS:,} "
                        "(docs/errors.md)", key_path="model.moe.experts")
    if model.position_embedding == "learned" and training.seq_len > model.max_position:
        if serving is not None:  # the sequence is serving's (load.py sets training.seq_len from it)
            raise UserError(f"input_len {serving.input_len} + output_len {serving.output_len} = {training.seq_len} "
                            f"tokens, but model {model.name} has learned positions for at most {model.max_position} "
                            "(model.max_position)", key_path="serving.input_len")
        raise UserError(f"{training.seq_len} tokens, but model {model.name} has learned positions for at most "
                        f"{model.max_position} (model.max_position)", key_path="training.seq_len")


def check_timeline(plan: ResolvedPlan) -> None:
    """The step-time engine replays every forward and backward of every micro-batch on every virtual stage: at most
    :data:`MAX_TIMELINE_OPS` of them (memory and time are linear in that count)."""
    if plan.training.mode == "inference":
        return
    p = plan.parallel
    ops = 2 * plan.num_microbatches * p.pp * p.vpp
    if ops > MAX_TIMELINE_OPS:
        raise UserError(
            f"global_batch {plan.training.global_batch:,} / (micro_batch {plan.training.micro_batch} x dp {plan.dp}) "
            f"= {plan.num_microbatches:,} micro-batches per step; x pp {p.pp} x vpp {p.vpp} x 2 passes = {ops:,} "
            f"pipeline operations, more than the {MAX_TIMELINE_OPS:,} the timeline replays (docs/errors.md; raise "
            "micro_batch or lower global_batch)", key_path="training.global_batch")
