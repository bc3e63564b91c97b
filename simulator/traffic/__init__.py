"""The communication each parallel dimension issues, as data (CommOp: dim, group, op, bytes, count, scope,
overlap). Imports ``simulator.plan`` and ``simulator.model`` only; timing is the schedule's job."""

from simulator.plan.params import StageParams, stage_params
from simulator.plan.recipe import sharding_stage
from simulator.traffic.layer import cp_ops, ep_ops, layer_traffic, tp_ops, ulysses_ops
from simulator.traffic.ops import DIMS, CommOp
from simulator.traffic.serving import serving_boundary_traffic, serving_layer_traffic, serving_step_traffic
from simulator.traffic.step import StepTraffic, data_parallel_traffic, pipeline_traffic, step_traffic

__all__ = [
    "DIMS", "CommOp", "StageParams", "StepTraffic", "cp_ops", "data_parallel_traffic",
    "ep_ops", "layer_traffic", "pipeline_traffic", "serving_boundary_traffic",
    "serving_layer_traffic", "serving_step_traffic", "sharding_stage", "stage_params", "step_traffic", "tp_ops",
    "ulysses_ops",
]
