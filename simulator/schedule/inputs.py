"""What one step's build reads, as small frozen value objects, and the per-plan :class:`StepInputs`.

- :class:`LayerInputs`: what :func:`simulator.pricing.compute.layer_time` reads of a plan (rank shape, GEMM dtype,
  the recipe's compute fields, the host and MoE kernel choices); :func:`layer_times` prices each layer kind.
- :class:`MoeInputs`: what the MoE layer of each stage reads (:func:`moe_timings`).
- :class:`DpInputs`: what each stage's DP ops and parameters read (:func:`simulator.traffic.step.stage_traffic`).
The functions taking them are pure and cached by them (:class:`simulator.schedule.cache.StepCache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from simulator.compute import ComputeEfficiency, default_efficiency
from simulator.compute.host import HostIssueCosts
from simulator.compute.layer import LayerTime, mean_layer_time
from simulator.hardware import GpuSpec
from simulator.model import ModelSpec, RankShape, layer_kinds
from simulator.moe import DEFAULT_MOE_SETTINGS, MoeSettings
from simulator.plan import ResolvedPlan
from simulator.plan.config import ParallelPlan
from simulator.plan.recipe import Recipe
from simulator.pricing.compute import layer_time
from simulator.pricing.groups import GroupTimer
from simulator.pricing.host import host_issue_costs
from simulator.pricing.moe_layer import MoeLayerTiming, moe_layer_timing
from simulator.program import PERMUTE_CHAINS
from simulator.schedule.cache import Fixed, StepCache
from simulator.topology import Topology
from simulator.traffic import StepTraffic, step_traffic
from simulator.traffic.step import stage_traffic


class LayerInputs(NamedTuple):
    """What :func:`simulator.pricing.compute.layer_time` reads of a plan besides the model, GPU and efficiency
    table: the rank shape, the GEMM dtype, the recipe's compute fields, the eager host's issue costs (None:
    graph-captured or not host-bound), the MoE permute chain, grouped or sequential experts, and whether the
    received rows are sorted by local expert."""

    shape: RankShape
    dtype: str
    attention: str
    eager: bool
    amp_casts: bool
    fp8_cast_bytes: tuple[float, float]
    grad_accum_bytes: float
    fsdp_copy_bytes: tuple[float, float]
    host: HostIssueCosts | None
    permute: str
    sequential_experts: bool
    sort_chunks: bool


def layer_inputs(plan: ResolvedPlan, dtype: str, moe: MoeSettings) -> LayerInputs:
    """The :class:`LayerInputs` of ``plan`` with GEMM dtype ``dtype`` under the ``moe:`` settings."""
    r = plan.recipe
    host = host_issue_costs(plan.training.profile) if plan.training.host_launch == "eager" else None
    # Megatron's all-to-all dispatcher (backend nccl) sorts the received rows by local expert and back
    sort_chunks = plan.moe_backend.sorted_by_expert and plan.shape.ep > 1 and plan.shape.local_experts > 1
    # an implementation profile that writes its own MoE block (Hugging Face's) names its chain
    permute = plan.training.profile.moe_permute or moe.permute
    return LayerInputs(plan.shape, dtype, r.attention, r.eager, r.amp_casts, r.fp8_cast_bytes, r.grad_accum_bytes,
                       r.fsdp_copy_bytes, host, permute, moe.experts == "sequential", sort_chunks)


def layer_times(cache: StepCache, fixed: Fixed, li: LayerInputs) -> tuple[tuple[bool, LayerTime], ...]:
    """One :class:`LayerTime` per FFN kind (MoE or dense) present in the model, as (is MoE, time) pairs; where
    layers of a kind differ in their attention window (alternating sliding-window layers) it is their
    layer-weighted mean, exact for the totals of any stage holding whole periods of the pattern."""
    model, groups = fixed.model, {}
    for index, count in layer_kinds(model):
        lt = layer_time(model, li.shape, fixed.gpu, fixed.eff, li.dtype, layer_index=index, attention=li.attention,
                        eager=li.eager, amp=li.amp_casts, fp8_cast_bytes=li.fp8_cast_bytes,
                        grad_accum_bytes=li.grad_accum_bytes, host=li.host, permute=PERMUTE_CHAINS[li.permute],
                        sequential_experts=li.sequential_experts, sort_chunks=li.sort_chunks,
                        fsdp_copy_bytes=li.fsdp_copy_bytes)
        groups.setdefault(model.is_moe_layer(index), []).append((lt, count))
    return tuple((kind, members[0][0] if len(members) == 1 else mean_layer_time(members))
                 for kind, members in groups.items())


class MoeInputs(NamedTuple):
    """What the MoE layer of each stage reads (:func:`moe_timings`): the plan's comm timer (its rank layout's
    groups and the MoE inputs of dispatch and combine), the layer inputs (the balanced MoE layer time and the
    rows per expert), the expert tensor parallelism and the pipeline depth."""

    timer: GroupTimer
    layer: LayerInputs
    etp: int
    pp: int


def moe_timings(cache: StepCache, fixed: Fixed, m: MoeInputs) -> tuple[MoeLayerTiming | None, ...]:
    """The MoE layer on each stage's EP group (:func:`simulator.pricing.moe_layer.moe_layer_timing`); stages
    whose EP groups have one value key share one."""
    base = dict(cache.get(layer_times, fixed, m.layer))[True]
    by_group: dict[tuple, MoeLayerTiming] = {}
    out = []
    for s in range(m.pp):
        key = m.timer.key("ep", s)
        if key not in by_group:
            by_group[key] = moe_layer_timing(fixed.model, m.etp, m.layer.shape.rows_per_expert, base,
                                             m.timer.moe_comm(s), m.timer.moe_algorithm(s), fixed.gpu, fixed.eff,
                                             m.layer.dtype)
        out.append(by_group[key])
    return tuple(out)


@dataclass(frozen=True, slots=True)
class DpInputs:
    """What :func:`simulator.traffic.step.stage_traffic` reads of a plan besides the model: its parallel config,
    world size, recipe and stage layers (its docstring). ``plan`` is the plan they were taken from, the one
    ``stage_traffic`` is called with; it is not part of the key (plans that differ only in micro-batch share the
    result), which holds because ``stage_traffic`` reads only the four compared fields
    (tests/unit/test_step_cache.py checks it)."""

    parallel: ParallelPlan
    world_size: int
    recipe: Recipe
    stage_layers: tuple[tuple[int, ...], ...]
    plan: ResolvedPlan = field(compare=False, hash=False, repr=False)


def dp_traffic(cache: StepCache, fixed: Fixed, d: DpInputs):
    """:func:`simulator.traffic.step.stage_traffic` by its :class:`DpInputs`."""
    return stage_traffic(d.plan)


@dataclass(frozen=True)
class StepInputs:
    """What every part of one step's build reads, assembled once per plan: the plan (with its resolved recipe and
    shapes), the GPU and its coefficients, the traffic, the time of each layer kind, each stage's MoE layer, the
    :class:`GroupTimer`, and the cache with its fixed parts."""

    model: ModelSpec
    plan: ResolvedPlan
    gpu: GpuSpec
    eff: ComputeEfficiency
    dtype: str
    traffic: StepTraffic
    timer: GroupTimer
    layers: dict[bool, LayerTime]
    moe: tuple[MoeLayerTiming | None, ...]
    layer: LayerInputs
    cache: StepCache
    fixed: Fixed
    offload_activation_bytes: float = 0.0
    """Saved-activation bytes the offloaded layers move to the host per micro-batch (Megatron activation offload;
    :func:`simulator.memory.offload.offloaded_activation_bytes`, given by the caller of :func:`prepare_step`)."""


def build_inputs(model: ModelSpec, plan: ResolvedPlan, topology: Topology, calibration,
                 eff: ComputeEfficiency | None, moe: MoeSettings | None, cache: StepCache | None = None
                 ) -> StepInputs:
    """The :class:`StepInputs` of ``plan``; ``cache``: the :class:`StepCache` the caller shares between plans
    (plan search), None: one of this step's own."""
    cache = StepCache() if cache is None else cache
    gpu = topology.cluster.node.gpu
    eff = eff or default_efficiency(gpu.architecture)
    settings = moe or DEFAULT_MOE_SETTINGS
    dtype = plan.gemm_dtype(gpu)
    fixed = cache.fixed(model, gpu, eff, topology, calibration, settings)
    timer = GroupTimer(plan, topology, calibration, moe, shared=cache.layout(plan))
    layer = layer_inputs(plan, dtype, settings)
    layers = dict(cache.get(layer_times, fixed, layer))
    per_stage: tuple[MoeLayerTiming | None, ...] = (None,) * plan.parallel.pp
    if True in layers and plan.parallel.ep > 1:
        per_stage = cache.get(moe_timings, fixed, MoeInputs(timer, layer, plan.parallel.etp, plan.parallel.pp))
    try:                            # plans that differ only in micro-batch share their stages' DP ops
        stages = cache.get(dp_traffic, fixed, DpInputs(plan.parallel, plan.world_size, plan.recipe,
                                                       plan.stage_layers, plan))
    except TypeError:               # an unhashable parallel: value (a list): not shared
        stages = None
    return StepInputs(model, plan, gpu, eff, dtype, step_traffic(plan, stages), timer, layers, per_stage, layer,
                      cache, fixed)
