"""The ``multimodal:`` section of a scenario: the model, the batch, and one plan per submodule (strict pydantic).

Rules checked in :func:`check_plans` (each error names the submodule and the rule, key path
``multimodal.plans.<name>...``): every submodule has a plan and no plan names an unknown submodule; each plan's
tp x pp x dp equals its GPU count; the GPU counts add up to the system's GPUs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.errors import UserError
from simulator.multimodal.spec import MultimodalSpec
from simulator.plan.config import Precision, Recompute

_STRICT = ConfigDict(extra="forbid", frozen=True)


class SubmodulePlan(BaseModel):
    """How one submodule is parallelized and how many GPUs it gets (DistMM's modality-aware partition)."""

    model_config = _STRICT

    gpus: int | None = Field(None, ge=1, description="GPUs of this submodule; null = tp * pp * dp")
    tp: int = Field(1, ge=1, description="tensor parallel size")
    pp: int = Field(1, ge=1, description="pipeline stages")
    dp: int | None = Field(None, ge=1, description="data parallel replicas; null = gpus / (tp * pp)")
    micro_batch: int = Field(1, ge=1, description="samples per micro-batch per replica")
    recompute: Recompute = Field("none", description="activation recomputation")
    sp: bool = Field(False, description="Megatron sequence parallelism (needs tp > 1)")
    distributed_optimizer: bool = Field(False, description="Megatron distributed optimizer over the replicas")

    def resolved_gpus(self) -> int | None:
        if self.gpus is not None:
            return self.gpus
        return self.tp * self.pp * self.dp if self.dp is not None else None


class UniformPlan(BaseModel):
    """The Megatron-style baseline: every submodule on every GPU with one (tp, pp, dp) (DistMM's colocated plan)."""

    model_config = _STRICT

    tp: int = Field(1, ge=1, description="tensor parallel size of every submodule")
    pp: int = Field(1, ge=1, description="pipeline stages of every submodule")
    micro_batch: int = Field(1, ge=1, description="samples per micro-batch per replica")
    recompute: Recompute = Field("none", description="activation recomputation")
    sp: bool = Field(False, description="Megatron sequence parallelism")


class ModelRef(BaseModel):
    """``multimodal.model``: a preset name (simulator/multimodal/presets) or the inline spec's fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    preset: str | None = Field(None, description="a shipped multimodal preset")


class MultimodalSection(BaseModel):
    """``multimodal:`` (docs/multimodal.md)."""

    model_config = _STRICT

    model: dict[str, Any] = Field(description="preset: NAME, or loss / embed_dim / submodules / projector inline")
    global_batch: int = Field(ge=1, description="samples (image-text pairs) per optimizer step")
    precision: Precision = Field("bf16", description="precision recipe of every submodule")
    optimizer: Literal["adam", "sgd", "adafactor"] = Field("adam", description="optimizer of every submodule")
    strategy: Literal["explicit", "distmm", "uniform"] = Field(
        "explicit", description="explicit: the plans below; distmm: the partitioner and data load balancer choose "
                                "them; uniform: the Megatron-style colocated plan")
    placement: Literal["separate_nodes", "same_node", "packed", "spread", "auto"] = Field(
        "auto", description="where submodules sit: whole nodes each, equal shares of every node, consecutive GPUs "
                            "whatever the counts (packed), every node as evenly as the counts allow (spread), or the "
                            "faster of the first two (auto; the DistMM search also tries packed and spread)")
    pipeline: Literal["distmm_pipe", "batch_sync"] = Field(
        "distmm_pipe", description="distmm_pipe: the search also weighs smaller micro-batches for pipelined plans "
                                   "(DistMM-Pipe's 2K of half size among them); batch_sync: the largest that fits "
                                   "(both keep the whole batch in flight before the loss)")
    encoder_placement: Literal["first_stage", "pool"] = Field(
        "pool", description="LLM-based models: the vision encoder on the LLM's first pipeline stage (Megatron) or "
                            "on a separate pool of GPUs given by its plan")
    compare: bool = Field(True, description="also evaluate the uniform plan and DistMM's plan and report both")
    plans: dict[str, SubmodulePlan] | None = Field(None, description="submodule name -> plan (strategy explicit)")
    uniform: UniformPlan | None = Field(None, description="the uniform plan (strategy uniform); null = searched")


def check_plans(spec: MultimodalSpec, plans: dict[str, SubmodulePlan] | None, gpus: int,
                needs_all: bool = True) -> dict[str, int]:
    """GPUs per submodule after the rules of the module docstring (raises UserError naming submodule and rule)."""
    names = [s.name for s in spec.submodules]
    plans = plans or {}
    unknown = [n for n in plans if n not in names]
    if unknown:
        raise UserError(f"plan for unknown submodule {unknown[0]!r} (submodules: {', '.join(names)})",
                        key_path=f"multimodal.plans.{unknown[0]}")
    missing = [n for n in names if n not in plans]
    if missing and needs_all:
        raise UserError(f"submodule {missing[0]!r} has no plan: every submodule needs one (submodules: "
                        f"{', '.join(names)})", key_path="multimodal.plans")
    counts = {}
    for name, plan in plans.items():
        n = plan.resolved_gpus()
        if n is None:
            raise UserError(f"submodule {name!r}: give gpus or dp", key_path=f"multimodal.plans.{name}")
        if n % (plan.tp * plan.pp):
            raise UserError(f"submodule {name!r}: gpus ({n}) is not a multiple of tp ({plan.tp}) * pp ({plan.pp})",
                            key_path=f"multimodal.plans.{name}.gpus")
        if plan.dp is not None and plan.tp * plan.pp * plan.dp != n:
            raise UserError(f"submodule {name!r}: tp ({plan.tp}) * pp ({plan.pp}) * dp ({plan.dp}) = "
                            f"{plan.tp * plan.pp * plan.dp} != gpus ({n})", key_path=f"multimodal.plans.{name}.dp")
        counts[name] = n
    total = sum(counts.values())
    if needs_all and total != gpus:
        parts = " + ".join(f"{k} ({v})" for k, v in counts.items())
        raise UserError(f"submodule GPU counts must add up to the system's GPUs: {parts} = {total} != {gpus}",
                        key_path="multimodal.plans")
    return counts
