"""The shipped multimodal scenarios' key numbers against their goldens (tests/regression/golden/multimodal/).
Rewrite on purpose with ``python -m tests.multimodal.test_goldens`` and say so in the commit."""

import json
import math
from pathlib import Path

import pytest

from simulator.entries.regress import compare
from simulator.multimodal.report import summary
from simulator.multimodal.scenario import load_multimodal, simulate_multimodal

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios" / "multimodal").glob("*.yaml"))
GOLDENS = ROOT / "tests" / "regression" / "golden" / "multimodal"


def points(path: Path) -> list[dict]:
    row = summary(simulate_multimodal(load_multimodal(path)))
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}]


def test_two_multimodal_scenarios_ship_with_goldens():
    assert len(SCENARIOS) >= 2
    assert {p.stem for p in SCENARIOS} == {p.stem for p in GOLDENS.glob("*.json")}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_multimodal_golden(scenario):
    golden = json.loads((GOLDENS / f"{scenario.stem}.json").read_text())["points"]
    differences = compare(scenario.name, golden, points(scenario))
    assert not differences, "\n".join(d.describe() for d in differences)


if __name__ == "__main__":
    for path in SCENARIOS:
        out = GOLDENS / f"{path.stem}.json"
        out.write_text(json.dumps({"scenario": f"scenarios/multimodal/{path.name}", "points": points(path)},
                                  indent=1, sort_keys=True) + "\n")
        print(f"wrote {out}")
