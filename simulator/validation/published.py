"""The development set of published training runs (issue 11): each run's scenario, measured step time, what
the model predicts for it, and the knobs its source leaves unsaid.

Data: ``data/published_runs/runs.csv`` (one row per run with its source, plan and the measured quantity; the
header lists the sources) and one scenario YAML per run beside it, written from the source's own numbers
(``runs.py`` regenerates both). These runs were never used to fit a coefficient; they are the development set,
and the held-out sources named in issue 11 are not among them.

Measured quantities become seconds per optimizer step: ``step_s`` as is; ``tokens_per_s`` (all GPUs) as
global_batch x seq_len / value; ``tflops_per_gpu`` as the model FLOPs of one step in the source's convention
(Megatron ``num_floating_point_operations`` up to MCore v0.8: full s^2 attention, no recompute) / GPUs / value;
``tflops_per_gpu_causal`` the same with the causal half of the s^2 scores (Megatron's formula from 2025 on,
``training.py`` at main 1e05700: ``seq_length / 2``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from simulator.entries.simulate import simulate
from simulator.model import model_flops
from simulator.resources import commented_csv
from simulator.scenario.load import load_scenario
from simulator.units.constants import GiB
from simulator.validation import VALIDATION_DATA

RUNS = VALIDATION_DATA / "published_runs"
GATES = {"mean": 0.10, "group": 0.15, "median_signed": 0.05}
"""Issue 11's bars: mean |error| <= 10%, no group above 15%, median signed error within +-5%."""


@dataclass(frozen=True)
class PublishedRun:
    """One run: measured vs predicted step time (s), predicted peak memory and whether it fits (the device peak:
    tensors, CUDA runtime and allocator reserve, NCCL's buffers, as ``simulate()`` decides out of memory)."""

    id: str
    group: str
    gpus: int
    measured_s: float
    predicted_s: float
    peak_GiB: float
    device_peak_GiB: float
    hbm_GiB: float
    trained: bool
    unsaid: str
    bottleneck: str

    @property
    def error(self) -> float:
        """Signed error: predicted / measured - 1 (negative = the model is optimistic)."""
        return self.predicted_s / self.measured_s - 1

    @property
    def oom(self) -> bool:
        return self.device_peak_GiB > self.hbm_GiB


def read_runs() -> list[dict[str, str]]:
    """The rows of ``runs.csv`` (comment lines skipped)."""
    return commented_csv(RUNS / "runs.csv")


def measured_step_s(row: dict[str, str], scenario) -> float:
    """Seconds per step of the row's measured quantity (module docstring)."""
    value, kind = float(row["measured_value"]), row["measured_quantity"]
    if kind == "step_s":
        return value
    t = scenario.training
    if kind == "tokens_per_s":
        return t.global_batch * t.seq_len / value
    if kind in ("tflops_per_gpu", "tflops_per_gpu_causal"):
        flops = model_flops(scenario.model, t.seq_len, t.global_batch, causal=kind.endswith("causal"))
        return flops / scenario.gpus / (value * 1e12)
    raise ValueError(f"runs.csv {row['id']}: unknown measured_quantity {kind!r}")


def published_runs() -> list[PublishedRun]:
    """Every run of the development set, simulated."""
    out = []
    for row in read_runs():
        scenario = load_scenario(RUNS / f"{row['id']}.yaml")
        result = simulate(scenario)
        neck = result.step.bottleneck
        out.append(PublishedRun(
            id=row["id"], group=row["group"], gpus=scenario.gpus, measured_s=measured_step_s(row, scenario),
            predicted_s=result.step.step_s, peak_GiB=result.memory.peak_bytes / GiB,
            device_peak_GiB=result.memory.device_peak_bytes / GiB,
            hbm_GiB=scenario.cluster.node.gpu.memory.capacity / GiB, trained=row["trained"] == "yes",
            unsaid=row["unsaid"], bottleneck=f"stage {neck['stage']}: {neck['resource']}"))
    return out


def summary(runs: list[PublishedRun]) -> dict[str, float]:
    """Mean |error| overall and per group, median signed error, and trained runs predicted out of memory."""
    out = {"mean": statistics.fmean(abs(r.error) for r in runs),
           "median_signed": statistics.median(r.error for r in runs),
           "oom_trained": float(sum(r.oom and r.trained for r in runs))}
    for group in sorted({r.group for r in runs}):
        out[f"mean_{group}"] = statistics.fmean(abs(r.error) for r in runs if r.group == group)
    return out


def passes(s: dict[str, float]) -> bool:
    """Whether issue 11's bars hold (:data:`GATES`, and no trained run predicted out of memory)."""
    groups = [v for k, v in s.items() if k.startswith("mean_")]
    return (s["mean"] <= GATES["mean"] and max(groups) <= GATES["group"]
            and abs(s["median_signed"]) <= GATES["median_signed"] and s["oom_trained"] == 0)
