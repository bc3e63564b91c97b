"""Every shipped scenario's key numbers against its golden JSON (rewrite on purpose: simulator regress --update)."""

from pathlib import Path

import pytest

from simulator.entries.regress import compare, read_golden, scenario_points

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
GOLDENS = ROOT / "tests" / "regression" / "golden"


def test_every_scenario_has_a_golden():
    missing = [s.name for s in SCENARIOS if read_golden(GOLDENS, s) is None]
    assert not missing, f"no golden for {missing}: run `simulator regress --update`"
    orphans = {p.stem for p in GOLDENS.glob("*.json")} - {s.stem for s in SCENARIOS}
    assert not orphans, f"goldens without a scenario: {sorted(orphans)}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_predictions_match_the_golden(scenario):
    golden = read_golden(GOLDENS, scenario)
    if golden is None:
        pytest.skip("no golden (reported by test_every_scenario_has_a_golden)")
    differences = compare(scenario.name, golden, scenario_points(scenario))
    report = "\n".join(d.describe() for d in differences)
    assert not differences, (f"{len(differences)} predicted numbers moved (if on purpose: "
                             f"`simulator regress --update`):\n{report}")
