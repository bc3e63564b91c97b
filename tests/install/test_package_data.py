"""Run-time data ships inside the package, one copy: ``simulator/data/*`` link to the top-level folders.

.ci/run builds the wheel, installs it in a fresh venv and runs the CLI outside the checkout; these tests keep the
checkout side honest: the links resolve to the folders users edit, and every data file under ``simulator/``
matches a package-data pattern of pyproject.toml (a new kind of file would otherwise be left out of the wheel).
"""

import os
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from simulator.cli.run_cmd import DEFAULT_SCENARIO
from simulator.hardware.loader import PROFILE_ROOT, list_profiles
from simulator.resources import default_scenario, golden_root, profile_root

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "simulator"


def test_shipped_data_is_the_top_level_folders():
    assert PROFILE_ROOT == profile_root()
    assert PROFILE_ROOT.resolve() == ROOT / "hardware_profiles"
    assert DEFAULT_SCENARIO == default_scenario()
    assert DEFAULT_SCENARIO.resolve() == ROOT / "scenarios" / "quickstart.yaml"
    assert (PACKAGE / "data" / "scenarios").resolve() == ROOT / "scenarios"
    assert golden_root().resolve() == ROOT / "tests" / "regression" / "golden"  # `simulator regress` from a wheel


def test_profiles_are_listed_from_the_package():
    assert {"dgx_a100_80gb", "dgx_h100", "h200_x2"} <= set(list_profiles("nodes"))
    assert {"h100_sxm5", "h200_sxm"} <= set(list_profiles("gpus"))


def test_every_data_file_matches_a_package_data_pattern():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["*"]
    data = [Path(root, name) for root, _, names in os.walk(PACKAGE, followlinks=True) for name in names
            if "__pycache__" not in root and not name.endswith(".py")]
    assert len(data) > 100  # profiles, scenarios, efficiency tables, validation data (through the links too)
    missed = [str(p.relative_to(PACKAGE)) for p in data if not any(fnmatch(p.name, pat) for pat in patterns)]
    assert not missed, f"not shipped in the wheel (add a pattern to pyproject.toml): {missed}"
