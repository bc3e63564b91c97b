"""Implementation profiles live in one place (issue 28): simulator/implementation/profiles.py and the shipped
files under simulator/implementation/frameworks/. No module outside simulator/implementation/ compares a
framework's name (a ``framework`` variable or attribute against a string): consumers read the profile's
attributes (``family``, host costs, kernel counts, ...) or the recipe's (``Recipe.eager``)."""

from __future__ import annotations

import ast
from pathlib import Path

from simulator.implementation.profiles import profile_names

ROOT = Path(__file__).resolve().parents[1] / "simulator"
HOME = ROOT / "implementation"
NAMES = frozenset(profile_names())
TESTS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _framework_like(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "framework" in name.lower()


def _strings(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _offences(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, TESTS) for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        if any(_framework_like(s) for s in sides) and any(_strings(s) for s in sides):
            lines.append(node.lineno)
    return lines


def test_no_module_outside_the_registry_compares_a_framework_name():
    found = {}
    for path in ROOT.rglob("*.py"):
        if HOME in path.parents:
            continue
        bad = _offences(ast.parse(path.read_text()))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert not found, f"framework names compared outside simulator/implementation/ (read the profile): {found}"


def test_the_check_catches_a_comparison():
    assert _offences(ast.parse('x = training.framework == "megatron"\ny = "pytorch" != c.framework\n')) == [1, 2]
    assert _offences(ast.parse('z = framework in ("nemo", "torchtitan")\n')) == [1]
    assert not _offences(ast.parse('x = profile.family == "megatron"\n'))
    assert {"megatron", "pytorch", "hf_transformers"} <= NAMES
