"""``simulator search --objective days|cost|energy`` ranks plans by the whole run (docs/whole_run.md)."""

from __future__ import annotations

import pytest

from simulator.errors import UserError
from simulator.search import search

SCENARIO = {
    "name": "search-run",
    "system": {"profile": "hgx_h200", "nodes": 4},
    "model": {"preset": "korthikanti-22b"},
    "training": {"seq_len": 2048, "global_batch": 256, "precision": "bf16"},
    "search": {"gpus": [16, 32], "micro_batch": [1], "tp": [8], "pp": [1], "recompute": ["selective"],
               "sharding": ["distributed_optimizer"], "schedule": ["1f1b"]},
    # a failure-prone cluster (0.5 failures per node-day, an hour to reschedule): more GPUs finish sooner but lose
    # a larger share of the run
    "run": {"tokens": 1.0e11, "gpu_hour_price": 2.0, "failures": {"rates": {"host": 0.5}},
            "restart": {"reschedule_s": 3600}, "checkpoint": {"mode": "sync", "write_Bps_per_node": 1.0e9}},
}


def test_days_and_cost_pick_different_gpu_counts():
    days = search(SCENARIO, objective="days")
    cost = search(SCENARIO, objective="cost")
    assert days.plans[0]["gpus"] == 32 and cost.plans[0]["gpus"] == 16
    fast, cheap = days.plans[0], cost.plans[0]
    assert fast["run_days"] < cheap["run_days"] and cheap["run_cost"] < fast["run_cost"]
    assert fast["run_goodput"] < cheap["run_goodput"]
    # cost is GPU-hours x the price
    assert cheap["run_cost"] == pytest.approx(2.0 * cheap["run_gpu_hours"])
    assert [p["run_energy_MWh"] for p in search(SCENARIO, objective="energy").plans] == sorted(
        p["run_energy_MWh"] for p in cost.plans)


def test_a_run_objective_needs_the_run_section():
    plain = {k: v for k, v in SCENARIO.items() if k != "run"}
    with pytest.raises(UserError, match="needs a run: section"):
        search(plain, objective="days")


def test_the_search_table_shows_the_whole_run():
    from simulator.report.search import render_search

    days = search(SCENARIO, objective="days")
    text = render_search(days, top=2, why_line=None)
    first = days.plans[0]
    assert "the whole run (run: section)" in text
    line = next(ln for ln in text.splitlines() if ln.split()[:2] == ["1", f"{first['run_days']:.2f}"])
    assert f"{first['run_cost']:,.0f}" in line and f"{first['run_goodput']:.1%}" in line
    assert "the whole run" not in render_search(search({k: v for k, v in SCENARIO.items() if k != "run"}),
                                                top=2, why_line=None)
