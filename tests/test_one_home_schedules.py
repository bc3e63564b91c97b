"""Pipeline schedules have one home each (issue 26, item 5): a schedule's name is written in its own file under
simulator/plan/schedules/ and nowhere else in the package, and no module outside simulator/plan/ tests which
schedule a plan runs: it asks the plan's schedule object (``ResolvedPlan.schedule``)."""

from __future__ import annotations

import ast
import inspect
import pathlib

from simulator.plan.schedules import SCHEDULES, registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simulator"
PLAN = PACKAGE / "plan"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _is_schedule_value(node: ast.AST) -> bool:
    """``x.schedule`` or ``x.schedule.name``: the name a plan runs."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "schedule"


def test_each_schedule_name_is_written_only_in_its_own_file():
    """Every string constant equal to a registered name (a comparison, a tuple, a set, a dict key, a default)
    lies in the file that defines its schedule's class, or in the registry."""
    homes = {name: {pathlib.Path(inspect.getsourcefile(type(s))).resolve(), pathlib.Path(registry.__file__).resolve()}
             for name, s in SCHEDULES.items()}
    assert set(homes) >= {"1f1b", "gpipe", "dualpipe", "dualpipev", "zb1p", "zbv"}
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in homes and path.resolve() not in homes[node.value]:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert found == []


def test_no_module_outside_plan_tests_a_schedule():
    """Outside simulator/plan/ no comparison or membership test reads ``.schedule`` (or its ``.name``), and no
    module names a set of schedules (``SPLIT_SCHEDULES``, ``V_SCHEDULES`` style constants)."""
    found = []
    for path, tree in _modules():
        if path.is_relative_to(PLAN):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(_is_schedule_value(x) for x in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} compares a schedule")
            if isinstance(node, ast.Name | ast.alias) and (getattr(node, "id", None) or node.name).endswith(
                    "_SCHEDULES"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} a set of schedules")
    assert found == []
