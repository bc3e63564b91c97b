"""A pipeline schedule added as one file and one registration call (docs/architecture.md, "How to add a pipeline
schedule"): the toy below is GPipe's fill-drain order written from scratch under another name, with no closed
form for its in-flight count (the base class walks its orders) and no fast timeline (only the replay). It runs
end to end with no edit anywhere else, and its numbers are GPipe's."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import yaml

from simulator import load_scenario, simulate
from simulator.cli import main
from simulator.errors import UserError
from simulator.plan.schedules import SCHEDULES, Schedule, register_schedule
from simulator.schedule.timeline import run_timeline


@dataclass(frozen=True)
class FillDrain(Schedule):
    """Every stage runs all forwards (micro-batch by micro-batch, chunk by chunk), then all backwards."""

    def orders(self, pp: int, vpp: int, microbatches: int) -> list[list[tuple[str, int, int]]]:
        forwards = [("F", j, c) for j in range(microbatches) for c in range(vpp)]
        backwards = [("B", j, c) for j in range(microbatches) for c in range(vpp - 1, -1, -1)]
        return [forwards + backwards for _ in range(pp)]


TOY = FillDrain("toy_fill_drain")

SMALL = {"system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-8b"},
         "parallel": {"tp": 2, "pp": 4, "distributed_optimizer": True},
         "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 1}}


@pytest.fixture
def toy():
    register_schedule(TOY)                 # the one registration call
    yield TOY
    del SCHEDULES[TOY.name]                # leave the registry as the other tests expect it


def _run(schedule: str):
    return simulate(load_scenario({**SMALL, "parallel": {**SMALL["parallel"], "schedule": schedule}}))


def test_the_toys_timeline_is_the_hand_computed_fill_drain(toy):
    """pp 2, m 2, forward 1 s, backward 2 s per stage, no transfer lag: (m + pp - 1)(f + b) = 9 s."""
    timelines = run_timeline(toy.orders(2, 1, 2), [[1.0], [1.0]], [[2.0], [2.0]], 0.0)
    assert max(t.end_s for t in timelines) == 9.0
    assert timelines[0].wait_s == 3.0           # stage 0 idles from 2 s (its forwards) to 5 s (stage 1's B0)


def test_a_registered_toy_runs_end_to_end_and_equals_gpipe(toy):
    mine, gpipe, one_f_one_b = _run(toy.name), _run("gpipe"), _run("1f1b")
    assert mine.scenario.plan.schedule is toy
    # the toy is replayed, GPipe timed by its closed form (the same path lengths summed in another order)
    assert mine.step.step_s == pytest.approx(gpipe.step.step_s, rel=1e-12) and gpipe.step.step_s > 0
    assert mine.step.bubble_s == pytest.approx(gpipe.step.bubble_s, rel=1e-12)
    for i, (a, b, c) in enumerate(zip(mine.memory.stages, gpipe.memory.stages, one_f_one_b.memory.stages,
                                      strict=True)):
        assert a.bucket("activations") == b.bucket("activations")    # m = 4 micro-batches in flight, walked
        if i > 0:                                                    # 1F1B holds pp - i < m there
            assert a.bucket("activations") > c.bucket("activations")


def test_the_toy_brings_the_base_rules_and_unknown_names_list_it(toy):
    with pytest.raises(UserError, match="cannot interleave"):
        load_scenario({**SMALL, "parallel": {**SMALL["parallel"], "schedule": toy.name, "vpp": 2}})
    with pytest.raises(UserError, match="toy_fill_drain") as err:
        load_scenario({**SMALL, "parallel": {**SMALL["parallel"], "schedule": "nope"}})
    assert "parallel.schedule" in str(err.value) and "gpipe" in str(err.value)


def test_the_search_replays_the_toy_and_times_it_as_gpipe(toy, tmp_path, capsys):
    """No fast timeline: the plan search falls back to the replay and says so; its step time is GPipe's."""
    data = {k: v for k, v in SMALL.items() if k != "parallel"}
    data["parallel"] = {"tp": 2, "pp": 4}
    data["search"] = {"tp": [2], "pp": [4], "vpp": [1], "micro_batch": [1], "sharding": ["distributed_optimizer"],
                      "recompute": ["none"], "schedule": [toy.name, "gpipe"]}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["search", str(path), "--json", "--top", "10"]) == 0
    plans = {p["parallel"]["schedule"]: p for p in json.loads(capsys.readouterr().out)["plans"]}
    assert plans[toy.name]["timeline"] == f"replay ({toy.name})" and plans["gpipe"]["timeline"] == "closed form"
    assert plans[toy.name]["step_s"] == pytest.approx(plans["gpipe"]["step_s"], rel=1e-12)
