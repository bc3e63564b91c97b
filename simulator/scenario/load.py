"""Load and validate a scenario (docs/interface.md "Scenario YAML", plus ``extends:`` and sweeps).

Every section is validated strictly; a mistake is reported with the file, the line and the key path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import UserError
from simulator.hardware import ClusterSpec, FabricSpec, load_cluster, load_node
from simulator.hardware.calibration import calibration_system_problem, load_calibration
from simulator.implementation.moe_settings import MoeSettings
from simulator.implementation.serving import ServingConfig
from simulator.model import ModelSpec, load_hf_config, load_model_preset
from simulator.model.strict import build
from simulator.plan import (
    MoeBackend,
    ParallelPlan,
    ResolvedPlan,
    TrainingConfig,
    moe_backend,
    resolve_plan,
    serving_backend,
)
from simulator.plan.rules import check_serving_degrees, derive_dp
from simulator.scenario.document import Document, merge, read_document
from simulator.scenario.draft import check_speculative
from simulator.scenario.limits import check_gpu_count, check_inputs, check_timeline
from simulator.scenario.moe_section import resolve_histogram
from simulator.scenario.profile_section import scenario_profile, training_with_profile, with_defaults
from simulator.scenario.run_section import RunSection
from simulator.scenario.search_section import SearchSection
from simulator.yamlio import is_file, validation_error_to_user_error

TOP_LEVEL_KEYS = ("name", "description", "system", "model", "parallel", "training", "implementation", "moe", "serving",
                  "sweep", "zip", "search", "run")


class SystemSection(BaseModel):
    """``system:``: which hardware, how much of it, and its calibration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(description="node profile name in hardware_profiles/nodes, or a path to a node YAML")
    nodes: int = Field(1, gt=0, description="number of nodes")
    gpus: int | None = Field(None, gt=0, description="use only this many GPUs (default: all GPUs of all nodes)")
    calibration: str | None = Field(None, description="calibration YAML written by `simulator calibrate`")
    fabric: FabricSpec | None = Field(None, description="override the node profile's default fabric")
    net_issue: str = Field("cpu_proxy", pattern="^(cpu_proxy|ibgda)$",
                           description="who posts network work: cpu_proxy (IBRC) or ibgda (GPU-initiated)")
    gpu_speed_sigma: float | None = Field(
        None, ge=0, le=0.5, description="relative spread of per-GPU speed; the step runs at the expected slowest of "
                                        "its GPUs (null: 0.015 from Sinha et al. SC'22; 0: identical GPUs)")
    nvls: bool | None = Field(None, description="false turns NVLink SHARP off (as NCCL_NVLS_ENABLE=0); "
                                                "null keeps the node profile's")
    nvlink_domain_nodes: int | None = Field(
        None, ge=2, description="nodes of each multi-node NVLink domain the job uses: 16 of a GB200 NVL72 rack's 18 "
                                "compute trays gives 64-GPU domains (the other trays idle as spares); null: all")
    force_calibration: bool = Field(False, description="apply a calibration measured on another system (a warning "
                                                       "instead of an error; the CLI's --force-calibration)")


class Scenario(BaseModel):
    """A validated scenario: typed sections plus the cluster they run on."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    file: str | None = None
    name: str
    system: SystemSection
    cluster: ClusterSpec
    model: ModelSpec
    parallel: ParallelPlan
    training: TrainingConfig
    plan: ResolvedPlan
    calibration_path: str | None = None
    moe: MoeSettings = MoeSettings()
    notes: tuple[str, ...] = ()
    """Warnings about the input that the user chose to override (a forced calibration)."""
    serving: ServingConfig | None = None
    """``serving:`` (``simulator serve``); None for other scenarios."""
    run: RunSection | None = None
    """``run:``: the whole training run (simulator/wholerun/); None without the section."""

    @property
    def gpus(self) -> int:
        """GPUs the job uses."""
        return self.system.gpus or self.cluster.gpus


def load_scenario(source: str | Path | dict, overrides: dict | None = None) -> Scenario:
    """Validate a scenario from a YAML path or a mapping; ``overrides`` (a nested mapping) is merged on top.

    Raises:
        UserError: with file, line and key path. A file with ``sweep:``/``zip:`` is for ``simulator sweep``.
    """
    document = read_document(source)
    if overrides:
        document = Document(merge(document.data, overrides), document.file, document.origins)
    check_sections_not_empty(document)
    if document.data.get("sweep") or document.data.get("zip"):
        key = "sweep" if document.data.get("sweep") else "zip"
        file, line = document.where(key)
        raise UserError("this scenario is a sweep: run it with `simulator sweep`", file=file, key_path=key, line=line)
    try:
        return scenario_from_document(document)
    except UserError as exc:
        raise document.locate(exc) from None


def check_sections_not_empty(document: Document) -> None:
    """``sweep:`` or ``zip:`` given with nothing in it (``{}``, ``[]``, null) is a user error at its line: legal
    YAML, but a sweep that names no key is surely unintended (it would run the base plan alone, without a word)."""
    for key in ("sweep", "zip"):
        if key in document.data and document.data[key] in (None, {}, [], ""):
            file, line = document.where(key)
            value = "null" if document.data[key] is None else repr(document.data[key])
            raise UserError(f"the section is empty ({value}); give dotted keys with value lists "
                            f"(`{key}: {{parallel.tp: [1, 2, 4]}}`) or remove the section", file=file, key_path=key,
                            line=line)


@dataclass(frozen=True)
class Fixed:
    """The parts of a scenario a plan does not change: name, system, cluster, model, training, MoE settings and
    calibration (what ``simulator search`` keeps while it varies the plan)."""

    name: str
    system: SystemSection
    cluster: ClusterSpec
    model: ModelSpec
    training: TrainingConfig
    moe: MoeSettings
    calibration_path: str | None
    notes: tuple[str, ...]
    serving: ServingConfig | None = None
    run: RunSection | None = None

    @property
    def gpus(self) -> int:
        return self.system.gpus or self.cluster.gpus

    @property
    def moe_backend(self) -> MoeBackend:
        """The plan's MoE backend: ``moe.backend``, or with ``serving:`` the engine's ``all2all_backend`` (each step
        runs :meth:`~simulator.plan.MoeBackend.for_phase` of it)."""
        if self.serving is not None:
            return serving_backend(self.serving.all2all_backend)
        return moe_backend(self.moe.backend)

    def with_plan(self, plan: ResolvedPlan, file: str | None = None) -> Scenario:
        """The full scenario of one resolved plan on these fixed parts."""
        return Scenario(file=file, name=self.name, system=self.system, cluster=self.cluster, model=self.model,
                        parallel=plan.parallel, training=plan.training, plan=plan,
                        calibration_path=self.calibration_path, moe=self.moe, notes=self.notes, serving=self.serving,
                        run=self.run)


def fixed_parts(document: Document) -> Fixed:
    """Validate everything of a scenario but its plan (``parallel:`` is checked by the search that varies it);
    errors carry key paths (the caller adds file and line)."""
    return _parts(document, with_parallel=False)[0]


def _parts(document: Document, with_parallel: bool) -> tuple[Fixed, ParallelPlan | None]:
    """The sections in the order a user reads them, so the first mistake is the one reported."""
    data = document.data
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise UserError(f"unknown key (accepted: {', '.join(TOP_LEVEL_KEYS)})", key_path=unknown[0])
    name = _name(data, document)
    system = _system(data.get("system"), document)
    cluster = _cluster(system)
    model = _model(data.get("model"), document)
    profile = scenario_profile(data, document.file)
    serving = (build(ServingConfig, with_defaults(data["serving"], profile.serving_defaults), key_prefix="serving")
               if data.get("serving") else None)
    parallel = (build(ParallelPlan, data.get("parallel") or {}, key_prefix="parallel")
                if with_parallel or serving is not None else None)
    if serving is not None:
        parallel = _serving_expert_tp(parallel, model, data.get("parallel") or {})
    training_data = training_with_profile(_serving_training(data, serving, parallel, system, cluster), profile,
                                          data.get("implementation") is not None)
    training = build(TrainingConfig, training_data, key_prefix="training")
    moe = build(MoeSettings, data.get("moe") or {}, key_prefix="moe").for_net_issue(system.net_issue)
    moe = resolve_histogram(moe, model, document.file)
    build(SearchSection, data.get("search") or {}, key_prefix="search")
    calibration, notes = _calibration(system, cluster, document)
    check_inputs(model, training, serving)
    check_speculative(model, serving, document.where("serving.speculative.draft_model.hf_config")[0])
    run = _run(data.get("run"), document)
    return Fixed(name, system, cluster, model, training, moe, calibration, notes, serving, run), parallel


def _run(data: Any, document: Document) -> RunSection | None:
    """``run:`` validated, knowing where its keys were written (rules checked with the step time name them)."""
    if data is None:
        return None
    section = build(RunSection, data, key_prefix="run")
    if (document.data.get("training") or {}).get("mode") == "inference" or document.data.get("serving"):
        raise UserError("run: is a training run; this scenario is inference or serving", key_path="run")
    where = {key[len("run."):]: origin for key, origin in document.origins.items() if key.startswith("run.")}
    return section.located(where)


def scenario_from_document(document: Document) -> Scenario:
    """Build a :class:`Scenario` from merged data; errors carry key paths (the caller adds file and line)."""
    fixed, parallel = _parts(document, with_parallel=True)
    plan = resolve_plan(fixed.model, parallel, fixed.training, fixed.gpus, fixed.moe_backend)
    check_timeline(plan)
    return fixed.with_plan(plan, document.file)


def _serving_expert_tp(parallel: ParallelPlan, model, written: dict) -> ParallelPlan:
    """Serving engines shard every expert over the TP ranks when expert parallelism is off (vLLM FusedMoE and
    SGLang's MoE layers take the TP group as the expert's tensor-parallel group; TensorRT-LLM's moe_tp_size defaults
    to tp_size): an unwritten ``parallel.etp`` of a MoE serving plan with ep 1 is tp, not training's 1."""
    if model.moe is None or "etp" in written or parallel.ep != 1 or parallel.tp == 1:
        return parallel
    return parallel.model_copy(update={"etp": parallel.tp})


def _serving_training(data: dict, serving: ServingConfig | None, parallel: ParallelPlan, system: SystemSection,
                      cluster: ClusterSpec) -> Any:
    """``training:`` as given; with ``serving:`` the mode is inference and the memory's sequences are the serving
    batch of ``input_len + output_len`` tokens per DP rank (training's batch fields may be left out)."""
    training = data.get("training") or {}
    if serving is None:
        return training
    if not isinstance(training, dict):
        raise UserError(f"expected a mapping, got {type(training).__name__}", key_path="training")
    training = dict(training)
    check_serving_degrees(parallel)
    if training.get("mode", "inference") != "inference":
        raise UserError("a scenario with serving: needs training.mode: inference", key_path="training.mode")
    world = system.gpus or cluster.gpus
    dp = derive_dp(parallel, world)
    if serving.disaggregation is not None and serving.disaggregation.prefill_replicas >= dp:
        raise UserError(f"prefill_replicas ({serving.disaggregation.prefill_replicas}) must leave at least one of the "
                        f"{dp} DP replicas to decode", key_path="serving.disaggregation.prefill_replicas")
    training.update(mode="inference", micro_batch=serving.batch, seq_len=serving.input_len + serving.output_len,
                    global_batch=serving.batch * dp)
    return training


def _name(data: dict, document: Document) -> str:
    for key in ("name", "description"):
        value = data.get(key)
        if value is not None and not isinstance(value, str | int | float) or isinstance(value, bool):
            raise UserError(f"expected a text, got {type(value).__name__} {value!r}", key_path=key)
    return str(data.get("name") or (Path(document.file).stem if document.file else "scenario"))


def _calibration(system: SystemSection, cluster: ClusterSpec, document: Document) -> tuple[str | None, tuple]:
    """The calibration file's path (relative to the scenario that names it), checked to exist and to be measured
    on this system (else an error, or a note when ``system.force_calibration``)."""
    if not system.calibration:
        return None, ()
    path = relative_to_file(system.calibration, document.where("system.calibration")[0])
    if not is_file(path):
        raise UserError(f"calibration file {path!r} does not exist", key_path="system.calibration")
    calibration = load_calibration(path)
    problem = calibration_system_problem(calibration, cluster.node.name)
    if problem is None:
        return path, ()
    if not system.force_calibration:
        raise UserError(f"{path}: {problem} (system.force_calibration: true or --force-calibration applies it "
                        "anyway)", key_path="system.calibration")
    return path, (f"{path}: {problem}; applied because it was forced",)


def _system(data: Any, document: Document) -> SystemSection:
    if data is None:
        raise UserError("required section is missing (at least `system: {profile: NAME}`)", key_path="system")
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping, got {type(data).__name__}", key_path="system")
    try:
        system = SystemSection(**data)
    except ValidationError as exc:
        raise validation_error_to_user_error(exc, key_prefix="system") from None
    if Path(system.profile).suffix in (".yaml", ".yml"):  # a node file: relative to the scenario naming it
        path = relative_to_file(system.profile, document.where("system.profile")[0])
        if not is_file(path):
            raise UserError(f"node profile file {path!r} does not exist (a path is relative to the scenario that "
                            "names it)", key_path="system.profile")
        system = system.model_copy(update={"profile": path})
    return system


def _cluster(system: SystemSection) -> ClusterSpec:
    try:
        check_gpu_count(system.nodes, load_node(system.profile))
        cluster = load_cluster(system.profile, system.nodes, system.fabric, system.nvlink_domain_nodes)
    except UserError as exc:
        if exc.file:  # a problem inside the profile file itself: keep its own location
            raise
        raise UserError(exc.message, key_path=exc.key_path or "system.profile") from None
    if system.nvls is not None:
        switch = cluster.node.nvswitch
        if system.nvls and not (switch and switch.nvls):
            raise UserError(f"node profile {cluster.node.name} has no NVLS-capable NVSwitch", key_path="system.nvls")
        if switch is not None and not system.nvls:
            node = cluster.node.model_copy(update={"nvswitch": switch.model_copy(update={"nvls": False})})
            cluster = cluster.model_copy(update={"node": node})
    if system.gpus is not None and system.gpus > cluster.gpus:
        raise UserError(f"asks for {system.gpus} GPUs but {system.nodes} x {cluster.node.name} has {cluster.gpus}",
                        key_path="system.gpus")
    return cluster


def _model(data: Any, document: Document) -> ModelSpec:
    """``model:`` is a preset, a Hugging Face config.json, or inline fields; inline fields override the other two."""
    if data is None:
        raise UserError("required section is missing (preset: NAME, hf_config: PATH, or inline fields)",
                        key_path="model")
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping, got {type(data).__name__}", key_path="model")
    fields = dict(data)
    preset, hf = fields.pop("preset", None), fields.pop("hf_config", None)
    if preset is not None and hf is not None:
        raise UserError("give either preset or hf_config, not both", key_path="model.hf_config")
    if preset is not None:
        base = load_model_preset(str(preset))
    elif hf is not None:
        base = load_hf_config(relative_to_file(str(hf), document.where("model.hf_config")[0]))
    else:
        return build(ModelSpec, fields, key_prefix="model")
    if not fields:
        return base
    return build(ModelSpec, {**base.model_dump(exclude_defaults=True), **fields}, key_prefix="model")


def relative_to_file(path: str, file: str | None) -> str:
    """A path written in a scenario is relative to that scenario's file."""
    candidate = Path(path)
    if candidate.is_absolute() or file is None:
        return str(candidate)
    return str(Path(file).parent / candidate)
