"""MoE backends live in one place (issue 26, item 5): the registry simulator/implementation/moe_backends.py (a backend
is an implementation; the resolved plan holds its object, ``ResolvedPlan.moe_backend``). No other module tests a MoE
backend's name (a comparison, a membership tuple or set, a dict keyed by names, a Literal of names): consumers read
the object's attributes; inside plan/ and implementation/ the names appear in the registry only."""

from __future__ import annotations

import ast
from pathlib import Path

from simulator.implementation.moe_backends import MOE_BACKENDS, SERVING_BACKENDS

ROOT = Path(__file__).resolve().parents[1] / "simulator"
HOME = ROOT / "implementation" / "moe_backends.py"
NAMES = frozenset(MOE_BACKENDS) | frozenset(SERVING_BACKENDS)
#: backend names that are also words of another namespace; they count only next to a backend variable or another
#: backend name: ``auto`` (the collectives' algorithm / protocol choice, multimodal placement), ``nccl`` (serving's
#: TP all-reduce kernel, torch.distributed's backend), ``cpu_proxy`` (a collective's network issue, ``NetIssue``)
SHARED = frozenset({"auto", "nccl", "cpu_proxy"})
TESTS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _names(node: ast.AST) -> list[str]:
    """The backend names among the string constants directly in ``node`` (a constant or a collection literal)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in items if isinstance(e, ast.Constant) and e.value in NAMES]


def _strings_only(node: ast.AST) -> bool:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in items)


def _backend_like(node: ast.AST) -> bool:
    """A variable or attribute whose name says it holds a backend (``settings.backend``, ``DEEPEP_BACKENDS``)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "backend" in name.lower() or "all2all" in name.lower()


def _names_a_backend(names: list[str], strings_only: bool) -> bool:
    """Whether a literal holding ``names`` names MoE backends: two of them, or one that is no other word (in a
    literal of strings only)."""
    return len(set(names)) >= 2 or (strings_only and any(n not in SHARED for n in names))


def offences(source: str) -> list[str]:
    """Where ``source`` tests a MoE backend's name (module docstring), as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, TESTS) for op in node.ops):
            sides = [node.left, *node.comparators]
            names = [n for side in sides for n in _names(side)]
            if any(map(_backend_like, sides)) or any(n not in SHARED for n in names):
                found.append(f"{node.lineno}: compares {names or 'a backend variable'}")
        elif isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            names = [n for k in keys for n in _names(k)]
            if names and _names_a_backend(names, all(map(_strings_only, keys))):
                found.append(f"{node.lineno}: dict keyed by {names}")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = _names(node)
            if names and _names_a_backend(names, _strings_only(node)):
                found.append(f"{node.lineno}: collection of {names}")
    return found


def _modules(outside_plan: bool) -> list[Path]:
    """Every module but the registry: outside plan/ and implementation/ (``outside_plan``), or inside them."""
    homes = (ROOT / "plan", ROOT / "implementation")
    return [p for p in sorted(ROOT.rglob("*.py"))
            if p != HOME and (not any(h in p.parents for h in homes)) == outside_plan]


def test_no_module_but_the_registry_tests_a_backend_name():
    bad = {str(p.relative_to(ROOT)): found for p in _modules(outside_plan=True) + _modules(outside_plan=False)
           if (found := offences(p.read_text()))}
    assert not bad, f"test the backend object's attributes (simulator/implementation/moe_backends.py) instead: {bad}"


def test_inside_plan_the_names_live_in_the_registry_only():
    bad = {}
    for path in _modules(outside_plan=False):
        if path == HOME:
            continue
        strings = [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)]
        if hits := sorted({s for s in strings if s in NAMES - SHARED}):
            bad[str(path.relative_to(ROOT))] = hits
    assert not bad, bad


def test_the_check_catches_each_form():
    """Each form the rule forbids is found, and the other namespaces' words are left alone."""
    caught = ['x = settings.backend == "deepep_normal"', 'x = name in ("nccl", "cpu_proxy")',
              'x = b in DEEPEP_BACKENDS', 'T = {"deepep_normal": 1, "nccl": 2}', 'B = ("deepep_low_latency",)',
              'x = all2all_backend != "auto"', 'x = backend == "nccl"', 'L = Literal["pplx", "naive"]']
    for source in caught:
        assert offences(source), source
    left = ['x = algo != "auto"', 'R = {"cpu_proxy": 1.0, "ibgda": 2.0}', 'T = {"nccl": None, "vllm_custom": 1}',
            'C = ("auto", "ll", "ll128")', 'dist.init_process_group("nccl")', 'row = ("a", 2, "deepep_normal", 1.5)',
            'x = backend.graph_capturable', 'x = rp.moe_backend is None']
    for source in left:
        assert not offences(source), source
