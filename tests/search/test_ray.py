"""``--executor ray``: the same search on a local Ray cluster (2 CPUs) ranks the plans exactly as the local one."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.scenario.document import read_document
from simulator.search import search
from simulator.search.rank import PLAN_KEYS

ray = pytest.importorskip("ray")

SMALL = Path(__file__).resolve().parents[2] / "scenarios" / "search_llama3_8b_h100.yaml"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_ranks_like_local(local_ray, monkeypatch):
    import simulator.search.executors as executors

    monkeypatch.setattr(executors, "SHARD", 64)      # several tasks, finishing in any order
    data = read_document(SMALL).data
    data["search"] = {**data["search"], "micro_batch": [1], "pp": [1, 2, 4]}
    local = search(data)
    remote = search(data, executor="ray")
    assert remote.evaluated == local.evaluated and remote.rejected == local.rejected
    assert [tuple(p[k] for k in PLAN_KEYS) for p in remote.plans] == [tuple(p[k] for k in PLAN_KEYS)
                                                                       for p in local.plans]
    assert [p["step_s"] for p in remote.plans] == [p["step_s"] for p in local.plans]
