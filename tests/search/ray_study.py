"""The driver of the two-node Ray test (tests/search/test_ray_cluster.py): a hardware x plan study, run in its own
process so that its Ray connection never meets the pytest process's (tests/search/test_ray.py's local cluster).

``python -m tests.search.ray_study local`` or ``... ray ADDRESS FOLDER`` prints one JSON object: per hardware option
the search's counts and its ten best plans (plan values and step time), and the study's ten best over every option;
with ``ray``, every shard leaves the id of the node that ran it as a file in FOLDER.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from typing import Any

from simulator.scenario.document import read_document
from simulator.search import search
from simulator.search.rank import PLAN_KEYS

#: the study: the Korthikanti 22B model (scenarios/korthikanti_22b.yaml, its parallel: section dropped) on two
#: nodes of each system, every plan with micro-batch 1 or 2
OPTIONS = {"dgx_a100_80gb x 2": {"profile": "dgx_a100_80gb", "nodes": 2},
           "dgx_h100 x 2": {"profile": "dgx_h100", "nodes": 2}}
SHARD = 96     # candidates per Ray task: several tasks per option, spread over both nodes


def study_scenarios() -> dict[str, dict[str, Any]]:
    base = read_document("scenarios/korthikanti_22b.yaml").data
    base.pop("parallel", None)
    out = {}
    for label, system in OPTIONS.items():
        data = copy.deepcopy(base)
        data["system"] = system
        data["search"] = {"micro_batch": [1, 2]}
        out[label] = data
    return out


def _top(plans: list[dict[str, Any]], n: int = 10) -> list[list[Any]]:
    return [[*(str(p[k]) for k in PLAN_KEYS), repr(p["step_s"])] for p in plans[:n]]


def _trace_nodes(folder: str) -> None:
    """Make every Ray shard leave its node's id in ``folder`` (both raylets run on this machine's file system)."""
    from pathlib import Path

    import ray

    import simulator.search.executors as executors

    shard = executors._ray_shard

    def traced(document, points, bound=None, lower_only=False):
        Path(folder, ray.get_runtime_context().get_node_id()).touch()
        return shard(document, points, bound, lower_only)

    executors._ray_shard = traced
    executors.SHARD = SHARD


def main(executor: str, address: str | None, trace: str | None) -> dict[str, Any]:
    if executor == "ray":
        import ray

        ray.init(address=address, log_to_driver=False)
        _trace_nodes(trace)
    rows, out, wall, points = [], {}, 0.0, 0
    for label, data in study_scenarios().items():
        start = time.perf_counter()
        result = search(data, executor=executor, ray_address=address)
        wall += time.perf_counter() - start
        points += result.evaluated
        out[label] = {"evaluated": result.evaluated, "valid": result.valid, "rejected": result.rejected,
                      "top": _top(result.plans)}
        rows += [{**p, "option": label} for p in result.plans]
    rows.sort(key=lambda p: (p["step_s"], p["option"], *(str(p[k]) for k in PLAN_KEYS)))
    out["study_top"] = [[p["option"], *t] for p, t in zip(rows, _top(rows), strict=False)]
    out["timing"] = {"wall_s": wall, "points": points}
    return out


if __name__ == "__main__":
    args = sys.argv[1:] + [None] * (4 - len(sys.argv))
    print(json.dumps(main(*args[:3])))
