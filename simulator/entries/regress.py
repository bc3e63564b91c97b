"""Regression goldens: the key numbers of every shipped scenario, frozen in JSON, and their differences.

A golden file holds ``{"scenario": path, "points": [summary, ...]}`` (one point for a plain scenario, one per plan
for a sweep). Numbers are compared with a relative tolerance; anything else must match exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.entries.simulate import simulate
from simulator.entries.sweep import plan_sweep, run_sweep
from simulator.scenario.document import read_document
from simulator.scenario.load import load_scenario

#: relative tolerance of golden comparisons: tight, only floating-point noise may pass
REL_TOL = 1e-9


@dataclass(frozen=True)
class Difference:
    scenario: str
    point: int
    key: str
    golden: Any
    current: Any

    def describe(self) -> str:
        change = ""
        if _number(self.golden) and _number(self.current) and self.golden:
            change = f" ({self.current / self.golden - 1:+.4%})"
        return f"{self.scenario} point {self.point}: {self.key}: {self.golden!r} -> {self.current!r}{change}"


def scenario_points(path: str | Path) -> list[dict[str, Any]]:
    """The summaries a golden holds for one scenario file (a sweep gives one per plan)."""
    data = read_document(path).data  # after extends: a sweep may be inherited
    if data.get("sweep") or data.get("zip"):
        return [_clean(row) for row in run_sweep(plan_sweep(path), processes=1)]
    scenario = load_scenario(path)
    row = simulate(scenario).summary()
    if scenario.serving is not None:
        from simulator.entries.serve import simulate_serving

        row.update(simulate_serving(scenario).summary())
    return [_clean(row)]


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def golden_path(golden_dir: Path, scenario: Path) -> Path:
    return golden_dir / f"{scenario.stem}.json"


def compare(scenario: str, golden: list[dict[str, Any]], current: list[dict[str, Any]],
            rel_tol: float = REL_TOL) -> list[Difference]:
    """Every key that moved, appeared or disappeared."""
    if len(golden) != len(current):
        return [Difference(scenario, -1, "points", len(golden), len(current))]
    out = []
    for index, (old, new) in enumerate(zip(golden, current, strict=True)):
        for key in dict.fromkeys([*old, *new]):
            a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
            same = math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12) if _number(a) and _number(b) else a == b
            if not same:
                out.append(Difference(scenario, index, key, a, b))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def write_golden(golden_dir: Path, scenario: Path, points: list[dict[str, Any]]) -> Path:
    path = golden_path(golden_dir, scenario)
    payload = {"scenario": scenario.name, "points": points}
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def read_golden(golden_dir: Path, scenario: Path) -> list[dict[str, Any]] | None:
    path = golden_path(golden_dir, scenario)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))["points"]
