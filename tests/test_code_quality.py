"""Code-level contracts: ruff (style and complexity) and the one-way import graph (ALLOWED below)."""

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simulator"

#: package -> the packages it imports directly: the design's package table (docs/architecture.md, "Layers"), read
#: transitively (a package may import what the packages it builds on import). Packages the table folds into a box:
#: moe is the MoE half of the collectives box (dispatch/combine on a placement), traffic the comm-op half of the
#: program box, multimodal an entry beside search, validation the published and measured data above the entries.
LAYERS = {
    "units": set(),
    "measure": {"units"},
    "hardware": {"units"},
    "topology": {"hardware"},
    "collectives": {"topology", "hardware"},
    "moe": {"collectives", "topology", "hardware", "model", "implementation"},
    "model": {"units"},
    "implementation": {"hardware", "units"},
    "plan": {"model", "hardware", "implementation"},
    "traffic": {"plan", "model"},
    "compute": {"model", "hardware"},
    "program": {"traffic", "plan", "model"},
    "pricing": {"program", "traffic", "compute", "collectives", "moe", "topology", "plan"},
    "memory": {"plan", "program", "model", "hardware"},
    "schedule": {"pricing", "plan"},
    "serving": {"pricing", "memory", "plan"},
    "scenario": {"hardware", "model", "plan", "implementation"},
    "search": {"schedule", "memory", "plan", "scenario", "wholerun"},
    "multimodal": {"schedule", "memory", "plan", "scenario"},
    "wholerun": {"scenario", "schedule", "memory"},
    "entries": {"scenario", "schedule", "serving", "memory", "wholerun"},
    "report": {"entries", "search", "multimodal", "serving"},
    "validation": {"entries", "search", "multimodal"},
    "cli": {"report", "validation", "measure"},
}


def _closure(package: str, seen: frozenset = frozenset()) -> set[str]:
    out = set()
    for below in LAYERS[package]:
        assert below not in seen | {package}, f"the import contract has a cycle through {package} and {below}"
        out |= {below} | _closure(below, seen | {package})
    return out


ALLOWED = {package: _closure(package) for package in LAYERS}
SHARED_LEAVES = {"errors", "yamlio", "resources", "limits", "caching", "arrays"}


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


def test_no_module_level_cache_outside_the_cache_module():
    """Process-wide caches are owned by simulator/caching.py (``memo``, ``IdentityCache``, one ``clear_caches``): no
    module keeps a module-level dict, decorates a module-level function with functools' caches (a closure's cache
    lives and dies with its call) or stores a cache in another object's ``__dict__`` (issue 26: caches keyed by their arguments, nothing reaching into private caches)."""
    patterns = {
        "a module-level dict": re.compile(r"^_?[A-Za-z_]+\s*(:\s*dict\[[^\n]*\])?\s*=\s*\{\}\s*$", re.M),
        "functools' cache on a module-level function": re.compile(r"^@(functools\.)?(lru_cache|cache)\b|import lru_cache",
                                                                  re.M),
        "a cache stored in another object's __dict__": re.compile(r"__dict__\.setdefault"),
    }
    registries = {"caching.py", "registry.py"}    # the cache module; the schedule registry (a table, not a cache)
    found = [f"{path.relative_to(ROOT)}: {what}" for path in PACKAGE.rglob("*.py") if path.name not in registries
             for what, pattern in patterns.items() if pattern.search(path.read_text())]
    assert not found, "\n".join(found)
