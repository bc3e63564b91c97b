"""What a plan implies has one home, simulator/plan/ (issue 26, "plan apart from batch"): no module outside it
re-derives a parallel degree from a GPU count, a head count per rank, or the GEMM dtype a GPU falls back to. They
read ``ResolvedPlan.dp``, ``plan.rules.data_parallel``, the plan's shape of a batch (``ResolvedPlan.shape_of``,
``RankShape.heads_tp / kv_heads_tp / kv_ranks``) and ``ResolvedPlan.gemm_dtype(gpu)``.

The patterns run on code tokens only (comments, docstrings and string text dropped, one space between tokens), so a
formula quoted in a docstring does not count and spacing cannot hide one. Like the recipe's grep test
(tests/unit/test_recipe.py), each pattern was checked to fire on the code before the move (53d6a80: serving's
``phase_plan``, ``gemm_dtype_on`` in five callers, ``m.kv / min(p.tp, m.kv)`` in serving memory, ``max(1.0, m.kv /
p.tp)`` in CP memory, ``min(tp, kv_heads)`` in model/params.py, ``world // model_ranks`` in scenario/load.py,
``gpus // (tp * pp)`` in the multimodal search); ``test_patterns_fire_on_the_old_forms`` keeps them honest.
"""

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simulator"
#: the home, and recorded published configurations (data written as the source states it, not derived by the model)
EXEMPT = ("simulator/plan/", "simulator/validation/data/")

_DEG = r"(?:tp|pp|cp|ulysses|dp|ep|etp)"
_HEADS = r"[\w.]*\b(?:heads|kv|kv_heads|num_heads|n_heads)"
#: (what it re-derives, pattern on the normalized token text)
PATTERNS = {
    "a degree from a GPU count (world // (tp * pp ...), // model_ranks)":
        re.compile(rf"// \( [\w.]*\b{_DEG} \*|// [\w.]*\bmodel_ranks\b"),
    "a head count per rank (heads / tp, kv // tp, heads / (tp * ulysses))":
        re.compile(rf"{_HEADS} //? \(? ?[\w.]*\b(?:tp|ulysses|t)\b"),
    "K/V replication over TP (min(tp, kv), max(1, kv / tp))":
        re.compile(rf"\bmin \( [\w.]*\btp , {_HEADS}\b|\bmin \( {_HEADS} , [\w.]*\btp\b|max \( 1(?:\.0)? , {_HEADS} /"),
    "the GPU's fallback GEMM dtype (gemm_dtype_on)":
        re.compile(r"\bgemm_dtype_on\b"),
    "a plan fabricated per serving phase (phase_plan)":
        re.compile(r"\bphase_plan\b"),
}

_DROP = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}
_DROP |= {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}


def code_text(source: str) -> str:
    """The code tokens of ``source``, one space apart, ``a . b`` written ``a.b`` (attribute access reads as one
    name), with comments, docstrings and string text left out (f-string expressions stay: they are code)."""
    tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in _DROP]
    return " ".join(tokens).replace(" . ", ".")


def offenders(what: str) -> list[str]:
    pattern = PATTERNS[what]
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith(EXEMPT):
            continue
        for match in pattern.finditer(code_text(path.read_text())):
            out.append(f"{rel}: {match.group(0)!r}")
    return out


@pytest.mark.parametrize("what", PATTERNS)
def test_nothing_outside_plan_re_derives(what):
    assert offenders(what) == [], f"re-derives {what} outside simulator/plan/"


@pytest.mark.parametrize(("what", "old"), [
    ("a degree from a GPU count (world // (tp * pp ...), // model_ranks)",
     "dp = parallel.dp or max(1, world // model_ranks)"),
    ("a degree from a GPU count (world // (tp * pp ...), // model_ranks)", "yield tp, pp, gpus // (tp * pp)"),
    ("a head count per rank (heads / tp, kv // tp, heads / (tp * ulysses))", "q = model.heads / (tp * ulysses)"),
    ("a head count per rank (heads / tp, kv // tp, heads / (tp * ulysses))", "kv_tp = max(1, kv // p.tp)"),
    ("K/V replication over TP (min(tp, kv), max(1, kv / tp))", "kv_heads = m.kv / min(p.tp, m.kv)"),
    ("K/V replication over TP (min(tp, kv), max(1, kv / tp))", "return t.numel / min(tp, kv_heads)"),
    ("K/V replication over TP (min(tp, kv), max(1, kv / tp))", "kv = max(1.0, m.kv / p.tp)"),
    ("the GPU's fallback GEMM dtype (gemm_dtype_on)", "dtype = plan.recipe.gemm_dtype_on(gpu.dtypes)"),
    ("a plan fabricated per serving phase (phase_plan)", "step_time(ctx, phase_plan(rp, n, new), n, new, past)"),
])
def test_patterns_fire_on_the_old_forms(what, old):
    """Each pattern catches the forms the code had before the move (and a docstring quoting one does not)."""
    assert PATTERNS[what].search(code_text(old + "\n"))
    assert not PATTERNS[what].search(code_text(f'"""{old}"""\n# {old}\n'))
