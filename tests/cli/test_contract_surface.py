"""The public surface of docs/interface.md stays as written: CLI flags and JSON keys (add freely, never rename).

Two layers: CONTRACT_FLAGS below freezes the flags the interface has always had (so removing them from the page
does not weaken the test), and the interface tests parse docs/interface.md itself: every flag and JSON key it
names for an implemented command is accepted or printed, its scenario YAML loads, and a section marked planned
names a command the CLI really lacks.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

import simulator
from simulator.cli import build_parser, main

INTERFACE = Path(__file__).resolve().parents[2] / "docs" / "interface.md"
SERVE_SCENARIO = str(Path(__file__).resolve().parents[2] / "scenarios" / "serve_rtx3090_llama3_8b.yaml")
PLANNED = "planned, not yet implemented"

CONTRACT_FLAGS = {
    "collective": ["--system", "--op", "--ranks", "--gpus-per-node", "--nodes", "--bytes", "--algo", "--proto",
                   "--calibration", "--json", "--plot"],
    "calibrate": ["--system", "--ranks", "--gpus-per-node", "--op", "--setting", "--out"],
    "moe": ["--system", "--nodes", "--ep", "--tokens", "--hidden", "--top-k", "--experts", "--topk-groups",
            "--backend", "--transport", "--qps", "--dispatch-dtype", "--json"],
    "run": ["--json", "--trace", "--plot"],
    "serve": ["--json", "--csv", "--plot"],
}


@pytest.mark.parametrize("command", sorted(CONTRACT_FLAGS))
def test_contract_flags_exist(command):
    missing = [f for f in CONTRACT_FLAGS[command] if f not in _flags(command)]
    assert not missing, f"simulator {command} lost docs/interface.md flags {missing}"


def _subcommands() -> dict:
    parser = build_parser([])
    return next(a for a in parser._actions if a.dest == "command").choices


def _flags(command: str) -> set[str]:
    return {s for action in _subcommands()[command]._actions for s in action.option_strings}


def _sections() -> dict[str, str]:
    """``simulator <command>`` section of docs/interface.md -> its text (heading included)."""
    parts = re.split(r"^(?=## )", INTERFACE.read_text(), flags=re.M)
    return {m.group(1): part for part in parts if (m := re.match(r"## `simulator (\w+)", part))}


def _usage_flags(section: str) -> set[str]:
    """Flags of the heading and of the usage block (the first code block, when it starts with ``simulator``)."""
    usage = section.splitlines()[0]
    block = re.search(r"```\n(simulator .*?)```", section, flags=re.S)
    if block:
        usage += " " + block.group(1)
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", usage))


def _documented_keys(section: str) -> set[str]:
    """JSON keys the section names: ``"key":`` and the members of brace lists such as ``{"op", "bytes"}``."""
    keys = set(re.findall(r'"(\w+)"\s*:', section))
    for group in re.findall(r"\{([^{}:]*)\}", section):
        keys.update(re.findall(r'"(\w+)"', group))
    return keys


def _all_keys(data) -> set[str]:
    if isinstance(data, dict):
        return set(data) | {k for v in data.values() for k in _all_keys(v)}
    if isinstance(data, list):
        return {k for v in data for k in _all_keys(v)}
    return set()


#: how each implemented command with a ``--json`` section is exercised
JSON_RUNS = {
    "run": ["run", "--json"],
    "collective": ["collective", "--system", "dgx_h100", "--op", "all_gather", "--ranks", "8", "--bytes", "1MiB",
                   "--json"],
    "moe": ["moe", "--system", "hgx_h800", "--nodes", "2", "--ep", "16", "--tokens", "4096", "--hidden", "7168",
            "--top-k", "8", "--experts", "256", "--json"],
    "serve": ["serve", SERVE_SCENARIO, "--bench", "--json"],
    "search": ["search", str(Path(__file__).resolve().parents[2] / "scenarios" / "search_llama3_8b_h100.yaml"),
               "--top", "2", "--json"],
}


def test_interface_page_covers_the_frozen_flags():
    sections = _sections()
    assert set(sections) >= {"collective", "calibrate", "run", "moe", "serve", "search"}
    for command, frozen in CONTRACT_FLAGS.items():
        assert set(frozen) <= _usage_flags(sections[command]), command


@pytest.mark.parametrize("command", sorted(_sections()))
def test_every_documented_flag_is_accepted(command):
    section = _sections()[command]
    if PLANNED in section.lower():
        assert command not in _subcommands(), f"simulator {command} exists: drop the planned mark in docs/interface.md"
        return
    missing = sorted(_usage_flags(section) - _flags(command))
    assert not missing, f"simulator {command} does not accept {missing} that docs/interface.md names"


@pytest.mark.parametrize("command", sorted(JSON_RUNS))
def test_every_documented_json_key_is_printed(command, capsys):
    section = _sections()[command]
    documented = _documented_keys(section)
    assert len(documented) >= 5, f"found only {documented} in the {command} section"
    assert main(JSON_RUNS[command]) == 0
    missing = sorted(documented - _all_keys(json.loads(capsys.readouterr().out)))
    assert not missing, f"simulator {command} --json lacks {missing} that docs/interface.md names"


def test_every_implemented_json_section_is_exercised():
    sections = _sections()
    with_json = {c for c, text in sections.items() if "`--json` prints" in text and PLANNED not in text.lower()}
    assert with_json == set(JSON_RUNS)


def test_interface_scenario_yaml_loads():
    section = INTERFACE.read_text().split("## Scenario YAML", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)
    scenario = simulator.load_scenario(yaml.safe_load(block))
    assert scenario.plan.parallel.tp == 8 and scenario.plan.parallel.pp == 8 and scenario.plan.dp == 1
    result = simulator.simulate(scenario)
    assert result.to_dict()["time"]["step_s"] > 0 and len(result.to_frame()) == 1


def test_run_json_keys(capsys):
    assert main(["run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["memory"]) >= {"peak_bytes", "stages"}
    assert set(data["memory"]["stages"][0]) >= {"stage", "weights", "gradients", "main_params", "optimizer",
                                                "activations", "other", "total"}
    assert set(data["time"]) >= {"step_s", "breakdown_s"}
    assert set(data["time"]["breakdown_s"]) >= {"compute", "recompute", "bubble", "optimizer", "exposed_comm"}
    assert set(data["time"]["breakdown_s"]["exposed_comm"]) >= {"tp", "cp", "ulysses", "ep", "pp", "dp"}
    assert set(data["throughput"]) >= {"tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
                                       "hfu"}
    assert data["comm"] and set(data["comm"][0]) >= {"dim", "op", "bytes", "count", "algorithm", "link", "time_s"}


def test_collective_json_keys(capsys):
    assert main(["collective", "--system", "dgx_h100", "--op", "all_gather", "--ranks", "8", "--bytes",
                 "1KiB,1GiB", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2
    for row in rows:
        assert set(row) >= {"op", "bytes", "ranks", "time_us", "algbw_GBps", "busbw_GBps", "algorithm", "protocol"}
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 7 / 8)   # (n-1)/n for all_gather


def test_moe_json_keys(capsys):
    assert main(["moe", "--system", "hgx_h800", "--nodes", "2", "--ep", "16", "--tokens", "4096", "--hidden",
                 "7168", "--top-k", "8", "--experts", "256", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"dispatch_us", "combine_us", "dispatch_GBps", "combine_GBps", "bottleneck"}
    assert data["bottleneck"] in ("nvlink", "rdma")


def test_collective_sizes_follow_the_contract(capsys):
    assert main(["collective", "--system", "dgx_a100_80gb", "--op", "all_reduce", "--ranks", "8", "--bytes",
                 "1KiB:8KiB", "--json"]) == 0
    assert [r["bytes"] for r in json.loads(capsys.readouterr().out)] == [1024, 2048, 4096, 8192]


def test_serve_rate_curve_keys(tmp_path, capsys):
    """serving.request_rate's keys (docs/serving/request_rate.md; frozen: add freely, never rename)."""
    path = tmp_path / "r.yaml"
    path.write_text("system: {profile: hgx_h200, gpus: 1}\nmodel: {preset: llama3-8b}\n"
                    "serving: {batch: 4, input_len: 256, output_len: 16, request_rate: [1, 1000000],\n"
                    "          num_requests: 50, arrival_seed: 0, max_num_seqs: 64}\n")
    assert main(["serve", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["saturation_request_rate"] > 1 and data["kv_capacity_blocks"] > 0
    stable, unstable = data["rate_curve"]
    assert set(stable) == {"request_rate", "stable", "utilization", "requests_per_s", "tokens_per_s",
                           "tokens_per_s_per_gpu", "batch_mean", "batch_max", "preemptions", "kv_blocks_peak",
                           "waiting_at_last_arrival", "requests_measured",
                           *(f"{m}_{q}_s" for m in ("ttft", "tpot", "e2e") for q in ("mean", "p50", "p90", "p99"))}
    assert stable["stable"] is True and unstable["stable"] is False and unstable["ttft_p99_s"] is None


def test_wrong_unit_in_a_scenario(tmp_path, capsys):
    path = tmp_path / "u.yaml"
    path.write_text("system:\n  profile: dgx_h100\n  nodes: 2\n  fabric: {kind: fat_tree, leaf_ports: 64,\n"
                    "           switch_latency: 130 parsecs}\nmodel: {preset: llama3-8b}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5: system.fabric.switch_latency: unknown time unit 'parsecs'" in err


def test_serve_json_keys(capsys):
    """The keys docs/interface.md names and the keys docs/serving/outputs.md adds (frozen: add freely, never rename)."""
    assert main(["serve", SERVE_SCENARIO, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"prefill", "decode", "ttft_s", "tpot_s", "e2e_s", "throughput", "memory", "kv_capacity_seqs",
                         "kv_capacity_seqs_steady",
                         "curve", "serving", "parallel", "warnings"}
    assert set(data["prefill"]) >= {"step_s", "tokens", "gpu_s", "kernels", "breakdown_s", "comm"}
    assert set(data["decode"]) >= {"step_s", "mean_step_s", "gpu_s", "kernels", "breakdown_s", "comm"}
    assert set(data["decode"]["breakdown_s"]) == {"gemm", "attention", "memory_ops", "launch", "experts", "tp_comm",
                                                  "ep_comm", "pp_comm", "host"}
    assert set(data["throughput"]) >= {"tokens_per_s", "tokens_per_s_per_gpu", "total_tokens_per_s",
                                       "requests_per_s", "tokens_per_s_per_user", "replicas"}
    assert set(data["memory"]) >= {"peak_bytes", "stages"}
    assert set(data["curve"][0]) >= {"concurrency", "batch_per_replica", "kv_limited", "ttft_s", "tpot_s", "e2e_s",
                                     "tokens_per_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_p50_s",
                                     "ttft_p90_s", "ttft_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s"}
    assert "disaggregation" in data
    assert set(data) >= {"kv_capacity_blocks", "saturation_request_rate", "rate_curve"}
    assert data["rate_curve"] == [] and data["saturation_request_rate"] is None  # no serving.request_rate here
    assert data["decode"]["comm"] and set(data["decode"]["comm"][0]) >= {"dim", "op", "bytes", "algorithm", "link",
                                                                         "time_s", "count"}
