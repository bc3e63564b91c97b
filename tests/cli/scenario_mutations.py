"""Hostile mutations of the shipped scenarios, and the one property every mutated scenario must have.

Shared by the hypothesis fuzz (tests/cli/test_fuzz_scenarios.py) and the 10,000-scenario benchmark
(benchmarks/fuzz_scenarios.py). A mutation replaces a value with a hostile one, deletes a key, adds an unknown key,
scales a number, or turns a section into a scalar; the property: the simulator either raises a located UserError
(a key path or a file) or returns a result whose JSON holds only finite numbers, and the step time is positive.
"""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))

HOSTILE_VALUES = (0, -1, 1, 2, 3, 7, 1024, 10**6, 10**9, 10**15, 2**63, 0.5, -0.0, 1e-300, 1e300, math.inf,
                  -math.inf, math.nan, True, False, None, "", "eight", "8", "80 GiB", "-1 GB/s", "1e400 GB",
                  "1.5 us", [], {}, [1, 2], {"a": 1}, "gelu", "rmsnorm", "fp8", "learned", "zipf", "gpipe",
                  "tp-cp-ep-dp-pp", "pp-dp-tp", "ibgda", "nvls", "inference", "deepep_low_latency", "dualpipe",
                  "dualpipev", "zb1p", "zbv", "x" * 300)


def base_documents() -> list[tuple[Path, dict]]:
    """Every shipped scenario after ``extends:`` merging (sweeps without their sweep sections)."""
    from simulator.scenario.document import read_document

    out = []
    for path in SCENARIOS:
        data = read_document(path).data
        data.pop("sweep", None)
        data.pop("zip", None)
        out.append((path, data))
    return out


def _leaves(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths (tuples of keys and indices) of every value in ``data``, sections included."""
    paths = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        paths.append((*prefix, key))
        paths.extend(_leaves(value, (*prefix, key)))
    return paths


def _set(data: Any, path: tuple, value: Any) -> None:
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def mutate(data: dict, rng: random.Random, count: int = 2) -> dict:
    """``data`` with ``count`` random hostile changes (the input is not modified)."""
    out = copy.deepcopy(data)
    for _ in range(count):
        paths = _leaves(out)
        if not paths:
            break
        path = rng.choice(paths)
        kind = rng.randrange(8)
        old = _get(out, path)
        if kind == 0 and isinstance(_get(out, path[:-1]) if path[:-1] else out, dict):
            del (_get(out, path[:-1]) if path[:-1] else out)[path[-1]]
        elif kind == 1 and isinstance(old, dict):
            old[rng.choice(["tpp", "nodez", "seq_length", "gpus_per_node", "extra"])] = rng.choice(HOSTILE_VALUES)
        elif kind == 2 and isinstance(old, int | float) and not isinstance(old, bool):
            _set(out, path, type(old)(old * rng.choice([0, -1, 2, 3, 16, 1000, 10**6])))
        elif kind >= 6 and isinstance(old, int) and not isinstance(old, bool):  # plausible: often a valid plan
            _set(out, path, max(1, old * 2 if kind == 6 else old // 2))
        elif kind >= 6 and isinstance(old, bool):
            _set(out, path, not old)
        else:
            _set(out, path, copy.deepcopy(rng.choice(HOSTILE_VALUES)))
    return out


def check(path: Path, data: dict) -> str:
    """Run one mutated scenario through the API; return 'error' or 'ok', or raise AssertionError on a finding.

    A UserError must be located (a key path or a file); a result must be finite (JSON with allow_nan=False) with
    a positive step time; any other exception propagates (a bug)."""
    import json

    from simulator import simulate
    from simulator.errors import UserError
    from simulator.scenario.document import Document
    from simulator.scenario.load import scenario_from_document

    try:
        result = simulate(scenario_from_document(Document(data, str(path))))
    except UserError as exc:
        assert exc.key_path or exc.file, f"unlocated error: {exc}"
        assert "Traceback" not in str(exc)
        return "error"
    payload = result.to_dict()
    json.dumps(payload, allow_nan=False)  # ValueError on NaN/Infinity
    if result.step is not None:
        assert 0 < result.step.step_s < math.inf, f"step time {result.step.step_s}"
    assert result.memory.peak_bytes >= 0
    return "ok"
