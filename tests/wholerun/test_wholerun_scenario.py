"""The ``run:`` section end to end: the shipped scenario, the CONTRACT keys, the text block, and bad input (exit 2
naming file, line, key path and rule)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import load_scenario, simulate
from simulator.cli import main
from simulator.model.params import param_counts

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "llama3_70b_run_h200.yaml"
SMALL = """\
name: small-run
system: {profile: hgx_h200, nodes: 2}
model: {preset: llama3-70b}
parallel: {tp: 8, pp: 2, sp: true, recompute: full, distributed_optimizer: true}
training: {seq_len: 4096, micro_batch: 1, global_batch: 16, precision: bf16}
run:
  steps: 1000
  pue: 1.2
  checkpoint:
    interval_s: 600
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_contract_keys_of_the_shipped_run():
    result = simulate(load_scenario(SCENARIO))
    run = result.to_dict()["run"]
    for key in ("days", "gpu_hours", "goodput", "interruptions", "energy_MWh", "cost"):
        assert isinstance(run[key], float), key
    assert set(run["checkpoint"]) >= {"bytes", "interval_s", "stall_s"}
    # Llama-3-70B has 70,553,706,496 parameters (the preset's count, as the Hugging Face model card's 70.6B);
    # bf16 weights + fp32 master + two fp32 Adam moments = 14 bytes each
    assert param_counts(result.scenario.model)["total"] == 70_553_706_496
    assert run["checkpoint"]["bytes"] == 70_553_706_496 * 14
    # the parts add up to the wall time; goodput is productive over wall
    assert sum(run["time_s"].values()) == pytest.approx(run["wall_s"])
    assert run["goodput"] == pytest.approx(run["time_s"]["productive"] / run["wall_s"])
    # GPU-hours count the job's 1024 GPUs and the 2 spare nodes' 16
    assert run["gpu_hours"] == pytest.approx(1040 * run["wall_s"] / 3600)
    assert run["cost"] == pytest.approx(2.5 * run["gpu_hours"])


def test_the_ramp_prices_its_smaller_batch_as_its_own_step():
    scenario = load_scenario(SCENARIO)
    result = simulate(scenario)
    run = result.to_dict()["run"]
    # 20B tokens at 256 x 8192 and the rest at 512 x 8192 tokens per step
    assert run["steps"] == pytest.approx(2.0e10 / (256 * 8192) + (1.5e12 - 2.0e10) / (512 * 8192))
    flat = simulate(load_scenario(SCENARIO, {"run": {"batch_ramp": None}})).to_dict()["run"]
    assert flat["steps"] == pytest.approx(1.5e12 / (512 * 8192))
    assert run["time_s"]["productive"] != flat["time_s"]["productive"]


def test_run_cli_prints_the_block_and_the_json(tmp_path, capsys):
    path = write(tmp_path, SMALL)
    assert main(["run", path]) == 0
    out = capsys.readouterr().out
    assert "whole run: " in out and "goodput" in out and "checkpoint (sync)" in out
    assert main(["run", path, "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["checkpoint"]["interval_s"] == 600.0
    # a sync checkpoint stalls for the whole write: 988 GB over 2 nodes' 100 GB/s storage links is 4.94 s, but each
    # of the 16 ranks writes its even DCP share (61.7 GB) itself at the measured 0.571 GB/s: 108.1 s
    assert 70_553_706_496 * 14 / 200e9 == pytest.approx(4.9388, abs=1e-4)
    assert run["checkpoint"]["stall_s"] == pytest.approx(70_553_706_496 * 14 / 16 / 0.571e9)
    assert run["checkpoint"]["stall_s"] == pytest.approx(108.12, abs=0.01)


@pytest.mark.parametrize(("fragment", "replacement", "key", "rule"), [
    ("  pue: 1.2", "  pue: 0.9", "run.pue", "greater than or equal to 1"),
    ("  steps: 1000", "  steps: 1000\n  tokens: 1e9", "run", "exactly one of tokens and steps"),
    ("  pue: 1.2", "  pue: 1.2\n  failures: {rates: {gpu: -0.001}}", "run.failures.rates.gpu",
     "greater than or equal to 0"),
    ("    interval_s: 600", "    interval_s: 6.0e+9", "run.checkpoint.interval_s", "longer than the run"),
    ("    interval_s: 600", "    interval_s: -5", "run.checkpoint.interval_s", "must be > 0"),
    ("    interval_s: 600", "    interval_s: 600\n    staging: fast", "run.checkpoint.staging",
     "'cached_pinned', 'pinned' or 'pageable'"),
    ("    interval_s: 600", "    interval_s: 600\n    writer: rank0", "run.checkpoint.writer",
     "'auto', 'rank_files' or 'distributed'"),
    ("    interval_s: 600", "    interval_s: 600\n    rank_write_Bps: 0", "run.checkpoint.rank_write_Bps",
     "greater than 0"),
])
def test_bad_run_input_exits_2_with_file_line_key_and_rule(tmp_path, capsys, fragment, replacement, key, rule):
    text = SMALL.replace(fragment, replacement)
    path = write(tmp_path, text)
    assert main(["run", path]) == 2
    err = capsys.readouterr().err
    line = next(i for i, row in enumerate(text.splitlines(), 1) if replacement.splitlines()[-1].strip() in row)
    assert f"{path}:" in err and key in err and rule in err, err
    assert "Traceback" not in err
    if key != "run":
        assert f"{path}:{line}" in err, err


def test_every_run_key_docs_interface_names_is_printed(capsys):
    """docs/interface.md "Whole training run": each key of its JSON block is in ``simulator run --json``."""
    import re

    text = (ROOT / "docs" / "interface.md").read_text().split("## Whole training run", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", text, flags=re.S).group(1)
    documented = set(re.findall(r'"(\w+)"\s*:', block))
    assert {"days", "goodput", "interruptions", "checkpoint", "stall_s", "energy_MWh", "cost"} <= documented
    assert main(["run", str(SCENARIO), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    keys = set(run) | set(run["checkpoint"])
    assert documented - {"run"} <= keys, sorted(documented - {"run"} - keys)
