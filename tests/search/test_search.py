"""``simulator search``: the ranking, the constraints, the errors (exit 2 with the most common rejections), the
outputs; and Korthikanti et al. 2023 Table 5: the search finds a plan no slower than the paper's, and the paper's
plan ranks in the top 5% of valid plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.errors import UserError
from simulator.scenario.document import read_document
from simulator.search import search

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "scenarios" / "search_llama3_8b_h100.yaml"


def _write(tmp_path, data: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _small(**search_section) -> dict:
    data = read_document(SMALL).data
    data["search"] = {**data["search"], **search_section}
    return data


def test_search_ranks_by_step_time_and_respects_memory():
    result = search(_small(micro_batch=[1]))
    steps = [p["step_s"] for p in result.plans]
    assert steps == sorted(steps) and result.valid == len(result.plans) > 10
    assert result.evaluated == result.valid + sum(result.rejected.values())
    headroom = 2 * 2**30
    assert all(p["device_peak_bytes"] + headroom <= 80 * 2**30 for p in result.plans)   # H100 80 GiB
    assert all(p["micro_batch"] == 1 for p in result.plans)


def test_pinned_parallel_values_fix_their_dimension():
    data = _small(micro_batch=[1])
    data["parallel"] = {"tp": 2, "recompute": "full"}
    result = search(data)
    assert {(p["tp"], p["recompute"]) for p in result.plans} == {(2, "full")}


def test_tokens_per_gpu_objective_prefers_fewer_gpus_at_equal_speed():
    result = search(_small(micro_batch=[1], gpus=[8, 16], pp=[1]), objective="tokens_per_s_per_gpu")
    rates = [p["tokens_per_s_per_gpu"] for p in result.plans]
    assert rates == sorted(rates, reverse=True) and {p["gpus"] for p in result.plans} == {8, 16}


def test_no_valid_plan_exits_2_with_the_most_common_reasons(tmp_path, capsys):
    data = _small(tp=[1, 2], pp=[1, 2], memory_headroom="79 GiB")     # 1 GiB left of 80: nothing fits
    code = main(["search", str(_write(tmp_path, data))])
    err = capsys.readouterr().err
    assert code == 2 and "no valid plan" in err and "Traceback" not in err
    # every plan of the space (split schedules too, round 11) is skipped by the memory bound: memory is named, with
    # the smallest lower bound of a peak
    assert "were skipped unresolved, a lower bound of their device peak above HBM" in err
    assert "the smallest device peak, at least" in err and "+ search.memory_headroom 79.0 GiB" in err


@pytest.mark.parametrize("section,key", [({"gpus": [4096]}, "search.gpus"), ({"tp": [0]}, "search.tp"),
                                        ({"typo": 1}, "search.typo"), ({"recompute": ["some"]}, "search.recompute")])
def test_impossible_constraints_exit_2_naming_the_key(tmp_path, capsys, section, key):
    code = main(["search", str(_write(tmp_path, _small(**section)))])
    err = capsys.readouterr().err
    assert code == 2 and key in err and "Traceback" not in err


def test_pin_outside_the_search_list_is_an_error():
    data = _small(tp=[1, 2])
    data["parallel"] = {"tp": 4}
    with pytest.raises(UserError, match="search.tp"):
        search(data)


def test_max_plans_refuses_a_larger_space():
    with pytest.raises(UserError, match="--max-plans 100"):
        search(_small(), max_plans=100)


def test_cli_json_csv_and_why(tmp_path, capsys):
    csv = tmp_path / "plans.csv"
    assert main(["search", str(SMALL), "--top", "3", "--json", "--csv", str(csv)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"evaluated", "valid", "rejected", "seconds", "plans"} and len(data["plans"]) == 3
    plan = data["plans"][0]
    assert set(plan) >= {"rank", "parallel", "training", "step_s", "peak_bytes", "mfu", "tokens_per_s"}
    assert plan["rank"] == 1 and set(plan["parallel"]) >= {"tp", "pp", "dp", "cp", "ep", "vpp", "zero"}
    assert len(csv.read_text().splitlines()) == data["valid"] + 1
    assert main(["search", str(SMALL), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "#1 beats #2" in out and "the largest difference is" in out and "rejected (count, rule)" in out


# Korthikanti et al., MLSys'23, Table 5 (the scenarios' plans: tp 8, pp 8 / 35, vpp 3, sp, selective recompute,
# micro-batch 1, on 64 / 280 A100s with global batch 64 / 280).
@pytest.mark.parametrize("name", ["korthikanti_175b", "korthikanti_530b"])
def test_search_matches_or_beats_korthikanti_plan(name):
    data = read_document(ROOT / "scenarios" / f"{name}.yaml").data
    paper = data.pop("parallel")
    best = search(data).plans[0]
    # among the plans of the paper's knobs (issue 13's space: no TP overlap, uniform split, Megatron's default
    # selective set, 1F1B or GPipe) it ranks in the top 5%; the knobs added since put variants of it above. The
    # whole search times only the plans that can reach its first ten (groups pruned by their bound), so the rank
    # among all of issue 13's plans comes from that space searched with every plan timed
    data["search"] = {"schedule": ["1f1b", "gpipe"], "split": ["uniform"], "tp_comm_overlap": [False],
                      "recompute_modules": [["core_attn"]]}
    paper_knobs = search(data, exact_top=None).plans
    mine = [p for p in paper_knobs if (p["tp"], p["pp"], p["vpp"], p["dp"], p["sp"], p["recompute"],
                                       p["recompute_modules"], p["micro_batch"], p["schedule"], p["sharding"],
                                       p["split"], p["tp_comm_overlap"], p["offload"])
            == (paper["tp"], paper["pp"], paper["vpp"], 1, True, "selective", "core_attn", 1, "1f1b", "none",
                "uniform", False, "none")]     # 2022 Megatron: no TP communication overlap
    assert len(mine) == 1, "the paper's plan is in the search space"
    assert best["step_s"] <= mine[0]["step_s"]
    index = paper_knobs.index(mine[0])
    assert index + 1 <= 0.05 * len(paper_knobs), (index, len(paper_knobs))


def test_pareto_front_by_hand():
    from simulator.report.search import pareto_front

    # (memory, time): (1, 5) and (2, 3) and (4, 1) trade off; (3, 4) is beaten by (2, 3); (5, 1) by (4, 1)
    points = [(3, 4), (1, 5), (4, 1), (2, 3), (5, 1)]
    assert pareto_front(points) == [1, 3, 2]


def test_cli_plot_draws_the_pareto_front(tmp_path, capsys):
    plot = tmp_path / "front.png"
    data = _small(micro_batch=[1], pp=[1, 2], gpus=[8, 16])   # two GPU counts: the time-vs-GPUs panel has a front
    assert main(["search", str(_write(tmp_path, data)), "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 1000 and f"to {plot}" in capsys.readouterr().out


def test_the_summary_line_counts_points_plans_and_timed_plans():
    """The text summary splits the points of the space into those the rules reject, those of groups the bound
    excludes before they are resolved, the plans that pass the rules but not memory, those not timed because the
    bound excludes them, and the timed plans; they add up to the points."""
    import re

    from simulator.report.search import render_search

    result = search(_small(micro_batch=[2]))      # (at micro-batch 2 every kind of count is there)
    line = render_search(result, 1, None).splitlines()[0]
    numbers = [int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) (?:points of|plans pass|of them|not timed|"
                                                           r"valid plans|points in groups|points whose device|"
                                                           r"points rejected)", line)]
    points, plans, memory, bounded, timed, grouped, by_peak, by_rules = numbers
    assert points == result.evaluated and timed == result.valid and memory == result.pruned_by_memory > 0
    assert bounded == result.pruned_by_bound > 0 and grouped == result.pruned_by_group_bound > 0
    assert by_peak == result.pruned_by_memory_bound > 0
    assert plans == timed + memory + bounded and points == plans + grouped + by_peak + by_rules
