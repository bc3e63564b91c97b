"""``simulate(scenario)``: everything the simulator predicts for one scenario, as one frozen result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.errors import UserError
from simulator.hardware.calibration import calibration_of
from simulator.memory import MemoryReport, estimate_memory
from simulator.memory.offload import check_host_memory, offload_memory, offloaded_activation_bytes
from simulator.plan import resolve_plan
from simulator.scenario.load import Scenario
from simulator.schedule import StepResult, simulate_step
from simulator.topology import topology_of
from simulator.units import GIBI
from simulator.wholerun import WholeRun, whole_run
from simulator.wholerun.run import run_steps

#: bubble share of the step above which a run is flagged
BUBBLE_WARNING = 0.20
#: exposed data-parallel communication share of the step above which a run is flagged
DP_EXPOSED_WARNING = 0.05


#: the columns of :meth:`Result.summary` of a training step (inference has the first seven); a test keeps them equal
SUMMARY_KEYS = (
    "gpus", "dp", "micro_batches", "memory.peak_bytes", "memory.peak_GiB", "memory.device_peak_bytes",
    "memory.margin_bytes", "memory.oom",
    "time.step_s", "time.compute_s", "time.recompute_s", "time.bubble_s", "time.optimizer_s", "time.host_s",
    *(f"time.exposed_{d}_s" for d in ("tp", "cp", "ulysses", "ep", "pp", "dp")),
    "throughput.tokens_per_s", "throughput.model_tflops_per_gpu", "throughput.mfu", "throughput.hfu")


#: the whole run's columns of :meth:`Result.summary` (scenarios with ``run:``)
RUN_SUMMARY_KEYS = ("days", "gpu_hours", "goodput", "interruptions", "energy_MWh", "cost")


@dataclass(frozen=True)
class Result:
    """Predictions for one scenario. ``to_dict()``: docs/interface.md's JSON; ``to_frame()``: one row."""

    scenario: Scenario
    memory: MemoryReport
    step: StepResult | None
    """None for ``training.mode: inference`` (the step-time engine times training steps)."""
    run: WholeRun | None = None
    """The whole training run, with a ``run:`` section (simulator/wholerun/)."""

    def to_dict(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "scenario": s.name,
            "system": {"profile": s.cluster.node.name, "nodes": s.cluster.nodes, "gpus": s.gpus},
            "model": s.model.name,
            "parallel": {"tp": s.parallel.tp, "pp": s.parallel.pp, "dp": s.plan.dp, "cp": s.parallel.cp,
                         "ep": s.parallel.ep, "ulysses": s.parallel.ulysses, "vpp": s.parallel.vpp},
            "memory": {**self.memory.to_dict(), "hbm_bytes": s.cluster.node.gpu.memory.capacity,
                       "oom": self.memory.oom, **offload_memory(s.plan, s.cluster)},
            **(self.step.to_dict() if self.step is not None else {}),
            **({"run": self.run.to_dict()} if self.run is not None else {}),
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        """What a careful engineer would flag: OOM with its margin, TP leaving NVLink, a large bubble, exposed DP
        communication, and the plan's own notes (replicated K/V heads...)."""
        out = []
        memory, capacity = self.memory, self.scenario.cluster.node.gpu.memory.capacity
        if memory.oom:
            out.append(f"OUT OF MEMORY: device peak {memory.device_peak_bytes / GIBI:.1f} GiB (tensors "
                       f"{memory.peak_bytes / GIBI:.1f} + runtime and allocator cache "
                       f"{memory.runtime_bytes / GIBI:.1f}) exceeds {capacity / GIBI:.1f} GiB HBM by "
                       f"{-memory.margin_bytes / GIBI:.1f} GiB")
        if self.step is None:
            return out + list(dict.fromkeys([*self.scenario.plan.notes, *memory.notes]))
        tp_links = {r.link for r in self.step.comm if r.dim == "tp"}
        if tp_links - {"nvlink"}:
            out.append(f"TP group leaves the NVLink domain (tp collectives over {', '.join(sorted(tp_links))})")
        step = self.step.step_s
        if self.step.bubble_s > BUBBLE_WARNING * step:
            out.append(f"pipeline bubble is {self.step.bubble_s / step:.0%} of the step (more micro-batches or "
                       "interleaving shrink it)")
        dp = self.step.exposed_comm_s.get("dp", 0.0)
        if dp > DP_EXPOSED_WARNING * step:
            out.append(f"exposed DP communication is {dp / step:.0%} of the step (overlap_grad_reduce / "
                       "overlap_param_gather hide it)")
        out += list(dict.fromkeys([*self.scenario.plan.notes, *memory.notes]))
        return out

    def summary(self) -> dict[str, Any]:
        """The key numbers as flat ``section.name`` keys (sweep rows and regression goldens use these)."""
        s, m, t = self.scenario, self.memory, self.step
        row = {
            "gpus": s.gpus, "dp": s.plan.dp, "micro_batches": s.plan.num_microbatches,
            "memory.peak_bytes": m.peak_bytes, "memory.peak_GiB": m.peak_bytes / GIBI,
            "memory.device_peak_bytes": m.device_peak_bytes, "memory.margin_bytes": m.margin_bytes,
            "memory.oom": m.oom,
        }
        if t is None:
            return row
        row.update({"time.step_s": t.step_s, "time.compute_s": t.compute_s, "time.recompute_s": t.recompute_s,
                    "time.bubble_s": t.bubble_s, "time.optimizer_s": t.optimizer_s, "time.host_s": t.host_s})
        row.update({f"time.exposed_{d}_s": v for d, v in t.exposed_comm_s.items()})
        row.update({"throughput.tokens_per_s": t.tokens_per_s, "throughput.model_tflops_per_gpu":
                    t.model_tflops_per_gpu, "throughput.mfu": t.mfu, "throughput.hfu": t.hfu})
        if self.run is not None:
            run = self.run.to_dict()
            row.update({f"run.{k}": run[k] for k in RUN_SUMMARY_KEYS})
        return row

    def to_frame(self):
        """One row, columns flattened with dots (``memory.peak_bytes``); stages as ``memory.stages.0.total``..."""
        import pandas as pd

        return pd.DataFrame([flatten(self.to_dict())])


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists of dicts become ``name.<i>.key`` columns."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out.update(flatten(item, f"{name}.{i}."))
        elif isinstance(value, list):
            out[name] = "; ".join(map(str, value))
        else:
            out[name] = value
    return out


def simulate(scenario: Scenario) -> Result:
    """Predict memory per GPU per stage and the step time with its breakdown (memory only for inference)."""
    memory = estimate_memory(scenario.plan, hbm_capacity_bytes=scenario.cluster.node.gpu.memory.capacity,
                             cluster=scenario.cluster)
    if scenario.training.mode == "inference":
        return Result(scenario=scenario, memory=memory, step=None)
    check_host_memory(scenario.plan, scenario.cluster)
    calibration = calibration_of(scenario.calibration_path) if scenario.calibration_path else None
    step = _step(scenario, scenario.plan, calibration)
    if scenario.run is None:
        return Result(scenario=scenario, memory=memory, step=step)
    return Result(scenario=scenario, memory=memory, step=step, run=_whole_run(scenario, memory, step, calibration))


def _step(scenario: Scenario, plan, calibration):
    return simulate_step(scenario.model, plan, topology_of(scenario.cluster), calibration=calibration,
                         moe=scenario.moe, gpu_speed_sigma=scenario.system.gpu_speed_sigma,
                         offload_activation_bytes=offloaded_activation_bytes(plan))


def _whole_run(scenario: Scenario, memory: MemoryReport, step: StepResult, calibration) -> WholeRun:
    """The run's stages (a batch ramp's smaller batches priced as steps of their own, on the same plan) and the
    whole run over them."""
    t = scenario.training
    stages = []
    for batch, steps in run_steps(scenario.run, t.global_batch, t.seq_len):
        if batch == t.global_batch:
            stages.append((steps, step))
            continue
        try:
            plan = resolve_plan(scenario.model, scenario.parallel, t.model_copy(update={"global_batch": batch}),
                                scenario.gpus, scenario.plan.moe_backend)
        except UserError as exc:
            raise _located(UserError(f"batch ramp stage at global_batch {batch}: {exc.message}",
                                     key_path="run.batch_ramp"), scenario) from None
        stages.append((steps, _step(scenario, plan, calibration)))
    try:
        return whole_run(scenario.run, scenario.plan, scenario.cluster, scenario.gpus, memory, stages)
    except UserError as exc:
        raise _located(exc, scenario) from None


def _located(exc: UserError, scenario: Scenario) -> UserError:
    """A whole-run error with the file and line of its ``run.`` key (the loader recorded them)."""
    if exc.file or not (exc.key_path or "").startswith("run."):
        return exc
    file, line = scenario.run.where(exc.key_path[len("run."):])
    return exc.located(file=file or scenario.file, line=line)
