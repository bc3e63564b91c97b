"""Hypothesis fuzz of scenario documents (issue #17): hostile mutations of every shipped scenario either exit 2
with a located message or give a finite result; never a traceback, every run within 10 s (the deadline).

benchmarks/fuzz_scenarios.py runs the same mutations 10,000 times in worker processes with a memory cap.
CI runs a fixed set of examples; FUZZ_RANDOM=1 draws new ones (for hunting).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from tests.cli.scenario_mutations import base_documents, check, mutate

BASES = base_documents()
FUZZ = settings(deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                derandomize=not os.environ.get("FUZZ_RANDOM"))
LOCATED = re.compile(r"^error: [^\s:]+(:\d+)?: ")  # a file (and line) or a key path first


def _refuse(constant):
    raise AssertionError(f"non-JSON constant {constant} in the output")


def run_cli(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, err


def assert_outcome(code, out, err):
    assert code in (0, 2), err
    if code == 2:
        assert LOCATED.match(err), f"unlocated message: {err}"
        return
    payload = json.loads(out, parse_constant=_refuse)
    if "time" in payload:
        assert 0 < payload["time"]["step_s"] < 1e12
    assert payload["memory"]["peak_bytes"] >= 0


@settings(FUZZ, max_examples=300)
@given(index=st.integers(0, len(BASES) - 1), rng=st.randoms(use_true_random=False), count=st.integers(1, 3))
def test_mutated_scenarios_through_the_api(index, rng, count):
    path, data = BASES[index]
    assert check(path, mutate(data, rng, count)) in ("ok", "error")


@settings(FUZZ, max_examples=60)
@given(index=st.integers(0, len(BASES) - 1), rng=st.randoms(use_true_random=False), count=st.integers(1, 3))
def test_mutated_scenarios_through_the_cli(tmp_path, capsys, index, rng, count):
    path, data = BASES[index]
    file = tmp_path / path.name
    file.write_text(yaml.safe_dump(mutate(data, rng, count)))
    assert_outcome(*run_cli(["run", str(file), "--json"], capsys))


TEXT_EDITS = ("delete", "duplicate", "indent", "anchor", "alias", "colon", "tab", "truncate")


@settings(FUZZ, max_examples=60)
@given(index=st.integers(0, len(BASES) - 1), edits=st.lists(st.tuples(st.sampled_from(TEXT_EDITS),
                                                                      st.integers(0, 200)), min_size=1, max_size=3))
def test_edited_yaml_text_through_the_cli(tmp_path, capsys, index, edits):
    """Raw text edits of the shipped files (a deleted or duplicated line, a broken indent, a stray anchor, alias,
    colon or tab, a truncated file): malformed YAML is located like any other mistake."""
    path = BASES[index][0]
    lines = path.read_text().replace("extends: ", f"extends: {path.parent}/").splitlines()
    for edit, at in edits:
        i = at % len(lines)
        lines = _edit(lines, edit, i)
    file = tmp_path / path.name
    file.write_text("\n".join(lines) + "\n")
    assert_outcome(*run_cli(["run", str(file), "--json"], capsys))


def _edit(lines, edit, i):
    line = lines[i]
    if edit == "delete":
        return lines[:i] + lines[i + 1:] or ["{}"]
    if edit == "duplicate":
        return lines[:i + 1] + [line] + lines[i + 1:]
    if edit == "truncate":
        return lines[:i] + [line[: len(line) // 2]]
    changed = {"indent": " " + line, "anchor": line + " &x", "alias": line.split(":")[0] + ": *x",
               "colon": line + ":", "tab": "\t" + line}[edit]
    return lines[:i] + [changed] + lines[i + 1:]


@pytest.mark.slow
def test_ten_thousand_mutated_scenarios():
    """The benchmark's 10,000 scenarios (fixed seeds, worker processes, a memory cap): no finding.
    No time limit here (a loaded machine would fail it): the benchmark run alone keeps its 10 s alarm."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "fuzz_scenarios.py"), "--scenarios", "10000",
                           "--workers", str(min(4, os.cpu_count() or 1)), "--seconds", "0"], capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10000 scenarios in" in proc.stdout and ", 0 findings" in proc.stdout
