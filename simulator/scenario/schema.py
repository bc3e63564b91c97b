"""JSON Schema of a scenario file, for editors' YAML completion (``simulator schema``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from simulator.implementation.moe_settings import MoeSettings
from simulator.implementation.serving import ServingConfig
from simulator.model import ModelSpec
from simulator.plan import ParallelPlan, TrainingConfig
from simulator.scenario.load import SystemSection
from simulator.scenario.run_section import RunSection


def _model_section() -> type[BaseModel]:
    """``model:``: preset or hf_config plus any ModelSpec field (all optional, inline fields override)."""
    fields: dict[str, Any] = {
        "preset": (str | None, Field(None, description="a shipped preset (simulator/model/presets)")),
        "hf_config": (str | None, Field(None, description="path to a local Hugging Face config.json")),
    }
    for name, info in ModelSpec.model_fields.items():
        fields[name] = (info.annotation | None, Field(None, description=info.description))
    return create_model("ModelSection", __config__=ConfigDict(extra="forbid"), **fields)


class ScenarioSchema(BaseModel):
    """A simulator scenario (docs/interface.md "Scenario YAML")."""

    model_config = ConfigDict(extra="forbid", title="simulator scenario")

    name: str | None = Field(None, description="label used in reports")
    description: str | None = Field(None, description="free text")
    extends: str | None = Field(None, description="another scenario file this one overrides (relative path)")
    system: SystemSection
    model: _model_section()  # type: ignore[valid-type]
    parallel: ParallelPlan | None = None
    training: TrainingConfig | None = None
    implementation: str | dict[str, Any] | None = Field(
        None, description="a profile file (path) or overrides of the profile training.framework names "
                          "(docs/implementation_profiles.md)")
    moe: MoeSettings | None = Field(None, description="MoE layers: EP backend, routing skew, overlap (docs/moe.md)")
    serving: ServingConfig | None = Field(None, description="simulator serve: workload and engine (docs/serving.md)")
    run: RunSection | None = Field(None, description="a whole training run: days, checkpoints, failures, energy, "
                                                     "cost (docs/whole_run.md)")
    sweep: dict[str, list[Any]] | None = Field(
        None, description="dotted key -> list of values; the sweep is their cartesian product")
    zip: dict[str, list[Any]] | None = Field(None, description="dotted key -> list; lists of one length move together")


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12, as pydantic writes it)."""
    return ScenarioSchema.model_json_schema()
