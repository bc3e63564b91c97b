"""The public surface of CONTRACT.md stays as written: CLI flags and JSON keys (add freely, never rename)."""

import json

import pytest

from simulator.cli import build_parser, main

CONTRACT_FLAGS = {
    "collective": ["--system", "--op", "--ranks", "--gpus-per-node", "--nodes", "--bytes", "--algo", "--proto",
                   "--calibration", "--json", "--plot"],
    "calibrate": ["--system", "--ranks", "--gpus-per-node", "--op", "--setting", "--out"],
    "moe": ["--system", "--nodes", "--ep", "--tokens", "--hidden", "--top-k", "--experts", "--topk-groups",
            "--backend", "--transport", "--qps", "--dispatch-dtype", "--json"],
    "run": ["--json", "--trace", "--plot"],
}


@pytest.mark.parametrize("command", sorted(CONTRACT_FLAGS))
def test_contract_flags_exist(command):
    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    flags = {s for action in sub._actions for s in action.option_strings}
    missing = [f for f in CONTRACT_FLAGS[command] if f not in flags]
    assert not missing, f"simulator {command} lost CONTRACT.md flags {missing}"


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


def test_wrong_unit_in_a_scenario(tmp_path, capsys):
    path = tmp_path / "u.yaml"
    path.write_text("system:\n  profile: dgx_h100\n  nodes: 2\n  fabric: {kind: fat_tree, leaf_ports: 64,\n"
                    "           switch_latency: 130 parsecs}\nmodel: {preset: llama3-8b}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5: system.fabric.switch_latency: unknown time unit 'parsecs'" in err
