"""Compute and communication are priced in one place (issue 26, "one pricing path"): the modules above the pricing
layer build programs (simulator/program/) and price them with simulator/pricing/ (``pricing.compute.price``,
``GroupTimer``, ``pricing.exchange``); none of them times a GEMM, a fused attention or a memory-bound kernel
itself, nor prices a collective through the collectives model directly.

What counts as pricing directly, on the code (an AST walk: docstrings and comments are not code):
- the compute timing functions, imported or called: ``gemm_times`` and ``peak_flops`` (``simulator.compute.gemm``),
  ``gemm_seconds``, ``memory_seconds`` and ``fused_attention_seconds`` (``simulator.compute.layer``);
- HBM bandwidth read off a GPU (``<gpu>.memory.bandwidth``: a memory-bound op priced by hand);
- the collectives model: ``build_cost_model``, ``evaluate`` and ``place_group`` imported from
  ``simulator.collectives``, or reached as ``collectives.<name>``.

``test_patterns_fire_on_the_old_forms`` checks each rule on the code it replaced (main at 3599a58, multimodal:
``gemm_times`` in evaluate.py, llm.py and compose.py; serving's ``disagg.py`` and ``step.py``).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the packages that must price through simulator/pricing/
SCOPE = ("simulator/multimodal/", "simulator/serving/")

COMPUTE_TIMERS = {"gemm_times", "peak_flops", "gemm_seconds", "memory_seconds", "fused_attention_seconds"}
COLLECTIVES_MODEL = {"build_cost_model", "evaluate", "place_group"}


def direct_pricing(source: str) -> list[str]:
    """Each place ``source`` prices compute or a collective directly (module docstring), as ``line: what``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("simulator."):
            names = {a.name for a in node.names}
            if node.module.startswith("simulator.compute"):
                out += [f"{node.lineno}: imports {n}" for n in sorted(names & COMPUTE_TIMERS)]
            if node.module.startswith("simulator.collectives"):
                out += [f"{node.lineno}: imports {n}" for n in sorted(names & COLLECTIVES_MODEL)]
        elif isinstance(node, ast.Name) and node.id in COMPUTE_TIMERS:
            out.append(f"{node.lineno}: calls {node.id}")
        elif isinstance(node, ast.Attribute):
            if node.attr in COMPUTE_TIMERS:
                out.append(f"{node.lineno}: calls {node.attr}")
            elif node.attr in COLLECTIVES_MODEL and isinstance(node.value, (ast.Name, ast.Attribute)) and \
                    (getattr(node.value, "id", None) or getattr(node.value, "attr", None)) == "collectives":
                out.append(f"{node.lineno}: calls collectives.{node.attr}")
            elif node.attr == "bandwidth" and isinstance(node.value, ast.Attribute) and node.value.attr == "memory":
                out.append(f"{node.lineno}: reads memory.bandwidth")
    return out


def offenders(package: str) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{hit}" for path in sorted((ROOT / package).rglob("*.py"))
            for hit in direct_pricing(path.read_text())]


@pytest.mark.parametrize("package", SCOPE)
def test_prices_through_the_pricing_layer(package):
    assert offenders(package) == [], f"{package} prices compute or collectives directly (module docstring)"


@pytest.mark.parametrize("old", [
    "from simulator.compute.gemm import gemm_times",
    "from simulator.compute.gemm import DTYPE_BYTES, gemm_times",
    "t = gemm_times([tokens, tokens], [a, b], [c, d], [1, 1], gpu, eff, dtype)",
    "from simulator.compute.gemm import gemm_times, peak_flops",
    "rate = peak_flops(gpu, 'bf16') * 0.5",
    "x = simulator.compute.layer.gemm_seconds(shapes, grouped, gpu, eff, d)",
    "rate = gpu.memory.bandwidth * kernel.kv_read_efficiency",
    "return nbytes / (ctx.gpu.memory.bandwidth * ctx.eff.memory_efficiency)",
    "from simulator.collectives import build_cost_model, evaluate, place_group",
    "from simulator.collectives.model import evaluate",
    "ev = collectives.evaluate(model, 'sendrecv', sizes)",
    "placement = simulator.collectives.place_group(topo, gpus)",
])
def test_patterns_fire_on_the_old_forms(old):
    assert direct_pricing(old), old


@pytest.mark.parametrize("fine", [
    "from simulator.multimodal.evaluate import evaluate_submodule",
    "from simulator.pricing.compute import price",
    "from simulator.pricing.exchange import group_call_s, pairs_exchange_s",
    "from simulator.compute.gemm import DTYPE_BYTES",
    '"""gemm_times in a docstring"""',
    "t = priced(program, gpu).fwd_s",
    "cap = gpu.memory.capacity",
])
def test_pricing_through_the_layer_does_not_fire(fine):
    assert direct_pricing(fine) == [], fine
