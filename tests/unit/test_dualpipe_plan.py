"""DualPipe and DualPipeV end to end: simulate(), the CLI's text and JSON reports, the search, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator import load_scenario, simulate
from simulator.cli import main
from simulator.traffic import DIMS

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "deepseek_v3_dualpipev_h800.yaml"

#: a small MoE plan on 2 DGX H100 nodes (Mixtral 8x7B, PP 4, EP 4) that runs every schedule
SMALL = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "mixtral-8x7b"},
         "parallel": {"tp": 1, "pp": 4, "ep": 4, "distributed_optimizer": True, "recompute": "full"},
         "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1}}


def _run(data: dict, schedule: str):
    return simulate(load_scenario({**data, "parallel": {**data["parallel"], "schedule": schedule}}))


def _parts_add_up(step) -> None:
    parts = (step.compute_s + step.recompute_s + step.bubble_s + step.optimizer_s + step.host_s
             + sum(step.exposed_comm_s.values()))
    assert parts == pytest.approx(step.step_s, rel=1e-9)


@pytest.fixture(scope="module")
def small():
    return {s: _run(SMALL, s) for s in ("1f1b", "dualpipe", "dualpipev")}


def test_the_breakdown_adds_up_and_the_work_is_the_same(small):
    for result in small.values():
        _parts_add_up(result.step)
    base = small["1f1b"].step
    for s in ("dualpipe", "dualpipev"):
        step = small[s].step
        assert step.hardware_flops_per_gpu == pytest.approx(base.hardware_flops_per_gpu, rel=1e-9)
        assert step.model_flops_per_gpu == pytest.approx(base.model_flops_per_gpu, rel=1e-9)


def test_dual_schedules_shrink_the_bubble(small):
    bubble = {s: r.step.bubble_s for s, r in small.items()}
    assert bubble["dualpipe"] < bubble["1f1b"] and bubble["dualpipev"] < bubble["1f1b"]


def test_dualpipe_doubles_the_model_states_and_adds_the_copy_all_reduce(small):
    one, two, v = (small[s].memory.stages for s in ("1f1b", "dualpipe", "dualpipev"))
    pp = len(one)
    for s in range(pp):
        for bucket in ("weights", "gradients", "main_params", "optimizer"):
            mine = two[s].bucket(bucket)
            assert mine == pytest.approx(one[s].bucket(bucket) + one[pp - 1 - s].bucket(bucket), rel=1e-12)
            if 0 < s < pp - 1:    # DualPipeV: one copy; its head sits on rank 0 (tests/unit/test_dualpipe.py)
                assert v[s].bucket(bucket) == pytest.approx(one[s].bucket(bucket), rel=1e-12)
    rows = [r for r in small["dualpipe"].step.comm if r.name == "DualPipe copy gradients"]
    assert len(rows) == 1 and rows[0].dim == "pp" and rows[0].op == "all_reduce" and rows[0].time_s > 0
    assert not [r for r in small["dualpipev"].step.comm if r.name == "DualPipe copy gradients"]


def test_the_ranks_that_run_the_loss_hold_logits(small):
    """1F1B: the last rank. DualPipe: both end ranks (rank 0 runs the last stage of the second copy). DualPipeV: rank
    0, where the V ends."""
    def names(s, stage):
        return {i.name for i in small[s].memory.stages[stage].items}
    holds = {s: [st for st in range(4) if "logits.fp32" in names(s, st)] for s in small}
    assert holds == {"1f1b": [3], "dualpipe": [0, 3], "dualpipev": [0]}


def test_activations_follow_the_in_flight_counts(small):
    """Stage 1 (no embedding or head): 1F1B holds pp - 1 = 3 micro-batches, DualPipe pp + 1 = 5 of the stage's
    layers, DualPipeV pp + 0.5 = 4.5."""
    act = {s: small[s].memory.stages[1].bucket("activations") for s in small}
    assert act["dualpipe"] / act["1f1b"] == pytest.approx(5 / 3, rel=1e-9)
    assert act["dualpipev"] / act["1f1b"] == pytest.approx(4.5 / 3, rel=1e-9)


def test_the_scenario_runs_and_dualpipev_beats_1f1b():
    data = yaml.safe_load(SCENARIO.read_text())
    v, base = _run(data, "dualpipev"), _run(data, "1f1b")
    _parts_add_up(v.step)
    assert v.step.step_s < base.step.step_s
    assert v.step.compute_s == pytest.approx(base.step.compute_s, rel=1e-9)
    assert v.step.exposed_comm_s["ep"] < base.step.exposed_comm_s["ep"]   # the pairs hide EP behind compute
    assert v.step.exposed_comm_s["pp"] == pytest.approx(2 * base.step.exposed_comm_s["pp"], rel=1e-9)
    assert v.memory.oom is False


def test_cli_text_and_json(capsys):
    assert main(["run", str(SCENARIO)]) == 0
    text = capsys.readouterr().out
    assert "step time" in text and "exposed ep comm" in text and "vpp 1 schedule dualpipev;" in text
    assert main(["run", str(SCENARIO), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["time"]["breakdown_s"]["exposed_comm"]) == set(DIMS)
    assert data["time"]["step_s"] > 0 and data["memory"]["peak_bytes"] > 0


def test_cli_trace(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["run", str(SCENARIO), "--trace", str(path)]) == 0
    capsys.readouterr()
    events = json.loads(path.read_text())
    names = {e.get("name", "") for e in (events["traceEvents"] if isinstance(events, dict) else events)}
    assert any(n.startswith("wgrad mb") for n in names) and any(n.startswith("fwd mb") for n in names)


@pytest.mark.parametrize("change,key,words", [
    ({"schedule": "dualpipe", "pp": 3, "pipeline_layers": None, "dp": None}, "parallel.pp", "pp must be even"),
    ({"vpp": 2}, "parallel.vpp", "vpp must be 1"),
])
def test_bad_plans_exit_2_naming_the_key(tmp_path, capsys, change, key, words):
    data = yaml.safe_load(SCENARIO.read_text())
    data["parallel"].update(change)
    data["parallel"] = {k: v for k, v in data["parallel"].items() if v is not None}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and key in err and words in err and "Traceback" not in err


def test_search_lists_dual_schedules_by_default_and_search_schedule_restricts(capsys):
    """Issue 30: the default space holds every registered schedule; ``search.schedule`` restricts it."""
    data = {k: v for k, v in SMALL.items() if k != "parallel"}
    data["parallel"] = {"tp": 1, "ep": 4, "recompute": "full"}
    data["search"] = {"pp": [4], "vpp": [1], "micro_batch": [1], "sharding": ["distributed_optimizer"]}
    default = _search(data, capsys)
    assert {"dualpipe", "dualpipev"} & {p["parallel"]["schedule"] for p in default["plans"]}
    data["search"]["schedule"] = ["1f1b", "gpipe"]
    assert {p["parallel"]["schedule"] for p in _search(data, capsys)["plans"]} <= {"1f1b", "gpipe"}
    data["search"]["schedule"] = ["dualpipev", "1f1b"]
    both = _search(data, capsys)
    how = {p["parallel"]["schedule"]: p["timeline"] for p in both["plans"]}
    assert how["dualpipev"] == "steady state" and how["1f1b"] == "steady state"


def _search(data: dict, capsys) -> dict:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(data, f)
    assert main(["search", f.name, "--json", "--top", "10"]) == 0
    Path(f.name).unlink()
    return json.loads(capsys.readouterr().out)
