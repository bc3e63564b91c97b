"""``simulate(scenario)``: everything the simulator predicts for one scenario, as one frozen result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.memory import MemoryReport, estimate_memory
from simulator.scenario.load import Scenario
from simulator.units import GIBI


@dataclass(frozen=True)
class Result:
    """Predictions for one scenario. ``to_dict()`` is CONTRACT.md's JSON; ``to_frame()`` one pandas row."""

    scenario: Scenario
    memory: MemoryReport

    def to_dict(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "scenario": s.name,
            "system": {"profile": s.cluster.node.name, "nodes": s.cluster.nodes, "gpus": s.gpus},
            "model": s.model.name,
            "parallel": {"tp": s.parallel.tp, "pp": s.parallel.pp, "dp": s.plan.dp, "cp": s.parallel.cp,
                         "ep": s.parallel.ep, "ulysses": s.parallel.ulysses, "vpp": s.parallel.vpp},
            "memory": {**self.memory.to_dict(), "hbm_bytes": s.cluster.node.gpu.memory.capacity,
                       "oom": self.memory.oom},
            "notes": list(s.plan.notes) + list(self.memory.notes),
        }

    def summary(self) -> dict[str, Any]:
        """The key numbers as flat ``section.name`` keys (sweep rows and regression goldens use these)."""
        s, m = self.scenario, self.memory
        return {
            "gpus": s.gpus, "dp": s.plan.dp, "micro_batches": s.plan.num_microbatches,
            "memory.peak_bytes": m.peak_bytes, "memory.peak_GiB": m.peak_bytes / GIBI,
            "memory.margin_bytes": m.margin_bytes, "memory.oom": m.oom,
        }

    def to_frame(self):
        """One row, columns flattened with dots (``memory.peak_bytes``); stages as ``memory.stage0.total``..."""
        import pandas as pd

        return pd.DataFrame([flatten(self.to_dict())])


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists of stage dicts become ``stage<i>`` keys."""
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
    """Predict memory per GPU per stage (and, once the step-time engine is wired, the step time)."""
    memory = estimate_memory(scenario.plan, hbm_capacity_bytes=scenario.cluster.node.gpu.memory.capacity)
    return Result(scenario=scenario, memory=memory)
