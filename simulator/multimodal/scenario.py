"""A multimodal scenario (``system:`` + ``multimodal:``): loading, validation and :func:`simulate_multimodal`.

Top-level keys: name, description, system (as any scenario), multimodal (:class:`MultimodalSection`). Every
mistake is a located UserError (file, line, key path), bad submodule plans name the submodule and the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import UserError
from simulator.hardware import ClusterSpec
from simulator.model.strict import build
from simulator.multimodal.balance import Settings, distmm_plan, uniform_plan
from simulator.multimodal.compose import MultimodalStep, distmm_step, uniform_step
from simulator.multimodal.config import MultimodalSection, check_plans
from simulator.multimodal.evaluate import PlanChoice, evaluate_submodule
from simulator.multimodal.llm import FirstStage, encoder_on_first_stage
from simulator.multimodal.monolithic import MonolithicStep, monolithic_plan
from simulator.multimodal.placement import feasible_placements, place
from simulator.multimodal.spec import MultimodalSpec, build_spec, load_multimodal_preset
from simulator.plan.rules import data_parallel
from simulator.scenario.document import Document, read_document
from simulator.scenario.load import SystemSection, _cluster, _system
from simulator.topology import Topology, topology_of

TOP_LEVEL_KEYS = ("name", "description", "system", "multimodal")
#: how much of a file is scanned for a ``multimodal:`` line (the YAML reader's own limit applies when parsing)
MAX_SCAN_BYTES = 2**20


@dataclass(frozen=True)
class MultimodalScenario:
    file: str | None
    name: str
    system: SystemSection
    cluster: ClusterSpec
    section: MultimodalSection
    spec: MultimodalSpec

    @property
    def gpus(self) -> int:
        return self.system.gpus or self.cluster.gpus


_SECTION = re.compile(r"^multimodal\s*:", re.MULTILINE)


def is_multimodal(source) -> bool:
    """Whether a scenario file (or mapping) has a top-level ``multimodal:`` section. A file is scanned as text
    first (a plain scenario is parsed once, by its own loader); a broken file is not multimodal: the plain loader
    reports its problem. (A multimodal section inherited only through ``extends:`` is not supported.)"""
    if isinstance(source, dict):
        return "multimodal" in source
    try:
        with open(source, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_SCAN_BYTES)
    except OSError:
        return False
    if not _SECTION.search(text):
        return False
    try:
        return "multimodal" in read_document(source).data
    except UserError:
        return False


def load_multimodal(source: str | Path | dict) -> MultimodalScenario:
    document = read_document(source)
    try:
        return _from_document(document)
    except UserError as exc:
        raise document.locate(exc) from None


def _spec(section: MultimodalSection) -> MultimodalSpec:
    data = dict(section.model)
    preset = data.pop("preset", None)
    if preset is not None:
        if data:
            raise UserError(f"give either preset or inline fields, not both (extra: {', '.join(data)})",
                            key_path="multimodal.model")
        return load_multimodal_preset(str(preset))
    return build_spec(data, key_prefix="multimodal.model")


def _from_document(document: Document) -> MultimodalScenario:
    data = document.data
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise UserError(f"unknown key in a multimodal scenario (accepted: {', '.join(TOP_LEVEL_KEYS)})",
                        key_path=unknown[0])
    system = _system(data.get("system"), document)
    cluster = _cluster(system)
    if system.gpus is not None and system.gpus != cluster.gpus:
        raise UserError("a multimodal scenario uses whole nodes (system.gpus must be null or all GPUs)",
                        key_path="system.gpus")
    section = build(MultimodalSection, data.get("multimodal"), key_prefix="multimodal")
    spec = _spec(section)
    llm = any(s.role == "llm" for s in spec.submodules)
    if section.strategy == "explicit":
        check_plans(spec, section.plans, cluster.gpus)
    elif section.plans:
        raise UserError(f"plans are for strategy explicit (strategy is {section.strategy})",
                        key_path="multimodal.plans")
    if llm and section.strategy != "explicit":
        raise UserError("an LLM-based model needs explicit plans (strategy: explicit)", key_path="multimodal.strategy")
    name = str(data.get("name") or (Path(document.file).stem if document.file else "multimodal"))
    return MultimodalScenario(document.file, name, system, cluster, section, spec)


@dataclass(frozen=True)
class MultimodalResult:
    scenario: MultimodalScenario
    step: MultimodalStep
    """The scenario's own plan (explicit, or what its strategy chose)."""
    uniform: MultimodalStep | None = None
    distmm: MultimodalStep | None = None
    first_stage: FirstStage | None = None
    monolithic: MonolithicStep | None = None
    """Megatron-LM's monolithic pipeline over all layers (None: not compared, or no such plan fits)."""
    compared: bool = False
    """``compare: true`` ran: uniform and monolithic are None where no such plan fits."""

    @property
    def speedup(self) -> float | None:
        """Uniform step over DistMM step (both searched): DistMM's figure of merit."""
        if self.uniform is None or self.distmm is None:
            return None
        return self.uniform.step_s / self.distmm.step_s

    @property
    def speedup_vs_monolithic(self) -> float | None:
        """Monolithic pipeline step over DistMM step (None when either is missing)."""
        if self.monolithic is None or self.distmm is None:
            return None
        return self.monolithic.step_s / self.distmm.step_s


def _explicit(sc: MultimodalScenario, topology: Topology) -> MultimodalStep:
    s = sc.section
    counts = check_plans(sc.spec, s.plans, sc.cluster.gpus)
    best, problem = None, None
    for how in feasible_placements(counts, sc.cluster.nodes, s.placement):
        ranks = place(counts, sc.cluster.node.gpus, sc.cluster.nodes, how)
        runs = {}
        for sub in sc.spec.submodules:
            p = s.plans[sub.name]
            choice = PlanChoice(p.tp, p.pp, data_parallel(counts[sub.name], tp=p.tp, pp=p.pp), p.micro_batch,
                                p.recompute, p.sp,
                                p.distributed_optimizer)
            try:
                runs[sub.name] = evaluate_submodule(sc.spec, sub, choice, ranks[sub.name], topology,
                                                    s.global_batch, s.precision, s.optimizer)
            except UserError as exc:
                if exc.key_path and exc.key_path.startswith("multimodal"):
                    raise
                problem = UserError(f"submodule {sub.name!r} with placement {how}: {exc.message}",
                                    key_path=f"multimodal.plans.{sub.name}")
                break
        if len(runs) < len(sc.spec.submodules):
            continue
        step = distmm_step(sc.spec, topology, runs, s.global_batch, how)
        if best is None or step.step_s < best.step_s:
            best = step
    if best is None:
        raise problem
    return best


def _uniform_given(sc: MultimodalScenario, topology: Topology) -> MultimodalStep:
    u, s = sc.section.uniform, sc.section
    gpus = tuple(range(sc.cluster.gpus))
    dp = data_parallel(len(gpus), tp=u.tp, pp=u.pp)
    if gpus and dp is None:
        raise UserError(f"uniform: tp ({u.tp}) * pp ({u.pp}) does not divide the {len(gpus)} GPUs",
                        key_path="multimodal.uniform")
    choice = PlanChoice(u.tp, u.pp, dp, u.micro_batch, u.recompute, u.sp)
    runs = {sub.name: evaluate_submodule(sc.spec, sub, choice, gpus, topology, s.global_batch, s.precision,
                                         s.optimizer) for sub in sc.spec.submodules}
    return uniform_step(sc.spec, topology, runs, s.global_batch)


def simulate_multimodal(sc: MultimodalScenario) -> MultimodalResult:
    """The scenario's step, and (``compare: true``) the searched uniform and DistMM plans side by side; for an
    LLM-based model, the encoder on the LLM's first stage next to the separate pool."""
    topology = topology_of(sc.cluster)
    s = sc.section
    settings = Settings(sc.spec, topology, s.global_batch, s.precision, s.optimizer, s.pipeline)
    llm = next((x for x in sc.spec.submodules if x.role == "llm"), None)
    uniform = distmm = first = monolithic = None
    if s.strategy == "explicit":
        step = _explicit(sc, topology)
    elif s.strategy == "uniform":
        step = _uniform_given(sc, topology) if s.uniform is not None else uniform_plan(settings)
    else:
        step = distmm = distmm_plan(settings)
    compared = s.compare and llm is None
    if compared:
        try:
            uniform = uniform_plan(settings)
        except UserError:   # Megatron's one micro-batch per replica does not fit: nothing to compare against
            uniform = None
        distmm = distmm or distmm_plan(settings)
        monolithic = monolithic_plan(settings)
    if llm is not None:
        p = s.plans[llm.name]
        dp = data_parallel(sc.cluster.gpus, tp=p.tp, pp=p.pp)
        if dp is None:
            raise UserError(f"plan of {llm.name!r}: tp ({p.tp}) * pp ({p.pp}) does not divide the {sc.cluster.gpus} "
                            "GPUs the encoder-on-first-stage layout spreads it over", key_path=f"multimodal.plans.{llm.name}")
        choice = PlanChoice(p.tp, p.pp, dp, p.micro_batch, p.recompute, p.sp)
        first = encoder_on_first_stage(sc.spec, choice, topology, s.global_batch, s.precision, s.optimizer)
    return MultimodalResult(sc, step, uniform, distmm, first, monolithic, compared)
