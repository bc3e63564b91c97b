"""Code-level contracts: ruff (style and complexity) and the one-way import graph (ALLOWED below)."""

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simulator"

#: package -> simulator packages it may import (the data flow from hardware and model to reports); modules at the top level are shared leaves
ALLOWED = {
    "units": set(),
    "hardware": {"units"},
    "topology": {"hardware", "units"},
    "collectives": {"topology", "hardware", "units"},
    "model": {"units"},
    "plan": {"model", "hardware", "units"},
    "memory": {"plan", "model", "hardware", "units"},
    "compute": {"model", "hardware", "units"},
    "traffic": {"plan", "model", "units"},
    "moe": {"collectives", "topology", "hardware", "model", "units"},
    "program": {"traffic", "plan", "model", "units"},
    "pricing": {"program", "traffic", "compute", "collectives", "topology", "plan", "model", "hardware", "moe", "units"},
    "schedule": {"pricing", "program", "traffic", "compute", "collectives", "topology", "plan", "model", "hardware", "moe", "units"},
    "serving": {"pricing", "program", "traffic", "compute", "collectives", "topology", "plan", "memory", "model", "hardware",
                "moe", "units"},
    "multimodal": {"pricing", "report", "scenario", "schedule", "traffic", "compute", "collectives", "topology", "plan", "memory", "model",
                   "hardware", "units"},
    "scenario": {"pricing", "serving", "schedule", "traffic", "compute", "collectives", "topology", "plan", "memory", "model",
                 "hardware", "moe", "units"},
    "search": {"pricing", "scenario", "schedule", "traffic", "compute", "collectives", "topology", "plan", "memory", "model",
               "hardware", "moe", "units"},
    "report": {"pricing", "serving", "scenario", "schedule", "memory", "collectives", "topology", "plan", "model", "hardware", "moe",
               "units"},
    "validation": {"pricing", "multimodal", "serving", "scenario", "schedule", "traffic", "compute", "collectives", "topology", "plan", "memory", "model",
                   "hardware", "moe", "units"},
    "cli": {"multimodal", "scenario", "report", "hardware", "topology", "collectives", "moe", "measure", "validation", "units",
            "search"},
    "measure": {"units"},
}
SHARED_LEAVES = {"errors", "yamlio", "resources", "limits"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("simulator."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("simulator."))
    return found


def test_imports_flow_one_way():
    violations = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            continue  # top-level modules (__init__, __main__, errors, yamlio)
        package = parts[0]
        allowed = ALLOWED.get(package)
        assert allowed is not None, f"package simulator.{package} is missing from the import contract"
        for imported in _imports(path) - {package} - SHARED_LEAVES:
            if imported not in allowed:
                violations.append(f"{path.relative_to(ROOT)} imports simulator.{imported}")
    assert not violations, "\n".join(violations)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by the test extra")
def test_ruff_is_clean():
    result = subprocess.run(["ruff", "check", "simulator", "tests", "benchmarks"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
