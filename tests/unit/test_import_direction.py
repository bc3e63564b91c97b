"""Imports flow one way (DESIGN.md): model -> units/errors; plan -> model; memory -> plan, model."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "simulator"
ALLOWED = {"model": {"units", "errors", "model"}, "plan": {"units", "errors", "model", "plan"},
           "memory": {"units", "errors", "model", "plan", "memory"}}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_one_way(package):
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("simulator."):
                    assert name.split(".")[1] in ALLOWED[package], f"{path}: imports {name}"
