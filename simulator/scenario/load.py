"""Load and validate a scenario (CONTRACT.md "Scenario YAML").

The ``system`` section is validated here in full. ``model``, ``parallel`` and ``training`` are checked for unknown
keys against the contract's key lists; their values are validated by the model and plan packages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import UserError
from simulator.hardware import ClusterSpec, FabricSpec, load_cluster
from simulator.yamlio import LocatedYaml, read_yaml, validation_error_to_user_error

#: keys CONTRACT.md documents for each free-form section
SECTION_KEYS = {
    "model": {"preset", "hf_config", "name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
              "activation", "norm", "tied_embeddings", "moe", "head_dim", "seq_len_max", "biases"},
    "parallel": {"tp", "pp", "dp", "cp", "ep", "vpp", "sp", "ulysses", "zero", "distributed_optimizer",
                 "megatron_fsdp", "etp", "order", "schedule", "recompute", "overlap_grad_reduce",
                 "overlap_param_gather", "tp_comm_overlap", "stage_layers"},
    "training": {"seq_len", "micro_batch", "global_batch", "precision", "optimizer", "framework"},
}


class SystemSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(description="node profile name in hardware_profiles/nodes, or a path to a node YAML")
    nodes: int = Field(1, gt=0)
    gpus: int | None = Field(None, gt=0, description="use only this many GPUs (default: all GPUs of all nodes)")
    calibration: str | None = Field(None, description="calibration YAML written by `simulator calibrate`")
    fabric: FabricSpec | None = Field(None, description="override the node profile's default fabric")


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    system: SystemSection
    model: dict[str, Any] | None = None
    parallel: dict[str, Any] | None = None
    training: dict[str, Any] | None = None


class Scenario(BaseModel):
    """A validated scenario: the parsed file plus the cluster it runs on."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    file: str | None
    spec: ScenarioFile
    cluster: ClusterSpec

    @property
    def gpus(self) -> int:
        return self.spec.system.gpus or self.cluster.gpus


def load_scenario(source: str | Path | dict) -> Scenario:
    """Validate a scenario from a YAML path or an already-parsed mapping; errors name file, line and key."""
    if isinstance(source, dict):
        located = LocatedYaml(source, {}, "<dict>")
        file = None
    else:
        located = read_yaml(source)
        file = str(source)
    data = located.data
    if not isinstance(data, dict):
        raise UserError("a scenario must be a YAML mapping with at least a `system:` section", file=file)
    try:
        spec = ScenarioFile(**data)
    except ValidationError as exc:
        raise validation_error_to_user_error(exc, file=file, located=located) from None
    _check_section_keys(spec, located, file)
    system = spec.system
    try:
        cluster = load_cluster(system.profile, system.nodes, system.fabric)
    except UserError as exc:
        raise exc.located(file=file, key_prefix=None if exc.file else "system.profile",
                          line=located.line_of("system.profile")) from None
    if system.gpus is not None and system.gpus > cluster.gpus:
        raise UserError(f"asks for {system.gpus} GPUs but {system.nodes} x {cluster.node.name} has {cluster.gpus}",
                        file=file, key_path="system.gpus", line=located.line_of("system.gpus"))
    return Scenario(file=file, spec=spec, cluster=cluster)


def _check_section_keys(spec: ScenarioFile, located: LocatedYaml, file: str | None) -> None:
    for section, allowed in SECTION_KEYS.items():
        values = getattr(spec, section)
        for key in values or {}:
            if key not in allowed:
                path = f"{section}.{key}"
                raise UserError(f"unknown key (check the spelling; accepted: {', '.join(sorted(allowed))})",
                                file=file, key_path=path, line=located.line_of(path))
