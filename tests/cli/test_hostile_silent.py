"""Issue #17: mistakes that used to exit 0 (or print nonsense) are now user errors, exit 2, before any work."""

import json
from pathlib import Path

import pytest

from simulator.cli.output import finite, print_json

CAL = "hardware_profiles/calibration/h200_x2.yaml"
SMALL = ("system:\n  profile: dgx_h100\n  nodes: 1\nmodel:\n  preset: llama3-8b\nparallel:\n  tp: 8\n"
         "training:\n  seq_len: 2048\n  micro_batch: 1\n  global_batch: 8\n")
SWEEP = "scenarios/llama3_70b_tp_pp_sweep.yaml"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_misspelled_sweep_key(cli, tmp_path):
    path = write(tmp_path, "s.yaml", SMALL + "sweep:\n  parallel.tpp: [1, 2]\n")
    code, _, err = cli("sweep", path, "-o", tmp_path / "o.csv")
    assert code == 2 and not (tmp_path / "o.csv").exists()
    assert (f"{path}:13: sweep.parallel.tpp: 'parallel.tpp' is not a scenario key: parallel has no key 'tpp' "
            "(accepted: cp, cp_comm, cpu_offloading_num_layers, deallocate_pipeline_outputs, distributed_optimizer, dp, "
            "ep,") in err


def test_bad_sweep_value(cli, tmp_path):
    path = write(tmp_path, "s.yaml", SMALL + "sweep:\n  parallel.tp: [1, eight]\n")
    code, _, err = cli("sweep", path, "-o", tmp_path / "o.csv")
    assert code == 2
    assert (f"{path}:13: sweep.parallel.tp.1: 'eight' is not a valid parallel.tp: Input should be a valid integer"
            in err)


def test_the_same_key_in_sweep_and_zip(cli, tmp_path):
    path = write(tmp_path, "s.yaml", SMALL + "sweep:\n  parallel.tp: [1, 2]\nzip:\n  parallel.tp: [4, 8]\n")
    code, _, err = cli("sweep", path, "-o", tmp_path / "o.csv")
    assert code == 2
    assert f"{path}:15: zip.parallel.tp: parallel.tp is in both sweep: (line 13) and zip:" in err


@pytest.mark.parametrize("processes", ["0", "-3"])
def test_sweep_needs_at_least_one_process(cli, tmp_path, processes):
    code, _, err = cli("sweep", SWEEP, "-o", tmp_path / "o.csv", "--processes", processes)
    assert code == 2 and f"argument --processes: expected a positive integer (at least 1), got {processes}" in err


def test_sweep_heatmap_flags_are_checked_before_the_sweep(cli, tmp_path):
    code, out, err = cli("sweep", SWEEP, "-o", tmp_path / "o.csv", "--plot", tmp_path / "h.png", "--x", "parallel.cp")
    assert code == 2 and out == "" and not (tmp_path / "o.csv").exists()
    assert "--x 'parallel.cp' is not a column of the sweep; swept keys: parallel.tp, parallel.pp" in err


def test_sweep_prints_the_plan_count_and_max_plans_overrides(cli, tmp_path):
    code, _, err = cli("sweep", SWEEP, "-o", tmp_path / "o.csv", "--max-plans", 10)
    assert code == 2 and "3 x 4 x 2 = 24 plans, more than --max-plans 10" in err
    code, out, err = cli("sweep", SWEEP, "-o", tmp_path / "o.csv", "--no-progress", "--processes", 1)
    assert code == 0 and "24 plans to evaluate" in err and "24 plans -> " in out


def test_regress_missing_or_empty_folder(cli, tmp_path):
    code, _, err = cli("regress", "--scenarios", tmp_path / "nope")
    assert code == 2 and f"--scenarios folder '{tmp_path / 'nope'}' does not exist" in err
    code, _, err = cli("regress", "--scenarios", tmp_path)
    assert code == 2 and f"--scenarios folder '{tmp_path}' holds no *.yaml scenario" in err


@pytest.mark.parametrize("system", ["dgx_h100", "dgx_a100_80gb"])
def test_calibration_of_another_system_is_an_error_unless_forced(cli, system):
    argv = ("collective", "--system", system, "--op", "all_reduce", "--ranks", 8, "--bytes", "1GiB", "--algo",
            "ring", "--json", "--calibration", CAL)
    code, _, err = cli(*argv)
    assert code == 2
    assert (f"{CAL}: system: calibration was measured on 'h200_x2', not on '{system}' (--force-calibration or "
            "system.force_calibration: true applies it anyway)") in err
    code, out, err = cli(*argv, "--force-calibration")
    assert code == 0 and f"warning: {CAL}: calibration was measured on 'h200_x2', not on '{system}'" in err
    forced = json.loads(out)[0]["time_us"]
    code, out, _ = cli(*argv[:-2])
    assert forced != pytest.approx(json.loads(out)[0]["time_us"], rel=1e-3)  # the calibration was applied


def test_scenario_calibration_of_another_system(cli, tmp_path):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "h200.yaml").write_text(Path(CAL).read_text())
    path = write(tmp_path, "cal.yaml", SMALL.replace("  nodes: 1\n", "  nodes: 1\n  calibration: cal/h200.yaml\n"))
    code, _, err = cli("run", path)
    assert code == 2 and f"{path}:4: system.calibration: " in err and "measured on 'h200_x2', not on 'dgx_h100'" in err
    code, _, err = cli("run", path, "--force-calibration")
    assert code == 0 and "warning: " in err and "applied because it was forced" in err


def test_collective_on_one_rank(cli):
    code, _, err = cli("collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks", 1, "--bytes", "4GiB",
                       "--json")
    assert code == 2 and "argument --ranks: expected a rank count (at least 2, at most 131,072), got 1" in err


def test_json_never_holds_nan_or_infinity(capsys):
    nulled = []
    assert finite({"a": [1.0, float("nan")], "b": {"c": float("inf")}}, nulled=nulled) == \
        {"a": [1.0, None], "b": {"c": None}}
    assert nulled == ["a.1 (nan)", "b.c (inf)"]
    print_json({"busbw_GBps": float("nan"), "ok": 2.5})
    out, err = capsys.readouterr()
    assert json.loads(out) == {"busbw_GBps": None, "ok": 2.5}
    assert "warning: no finite value for busbw_GBps (nan); written as null" in err


def test_learned_positions_limit_the_sequence(cli, tmp_path):
    path = write(tmp_path, "gpt.yaml", SMALL.replace("llama3-8b", "gpt3-175b").replace("seq_len: 2048",
                                                                                       "seq_len: 8192"))
    code, _, err = cli("run", path)
    assert code == 2
    assert (f"{path}:9: training.seq_len: 8192 tokens, but model gpt3-175b has learned positions for at most 2048 "
            "(model.max_position)") in err


def test_name_must_be_text(cli, tmp_path):
    path = write(tmp_path, "n.yaml", "name: [1, 2]\n" + SMALL)
    code, _, err = cli("run", path)
    assert code == 2 and f"{path}:1: name: expected a text, got list [1, 2]" in err


def test_low_latency_kernels_need_ibgda(cli, tmp_path):
    code, _, err = cli("moe", "--system", "hgx_h800", "--nodes", 2, "--ep", 16, "--tokens", 128, "--hidden", 7168,
                       "--top-k", 8, "--backend", "deepep_low_latency", "--transport", "ibrc")
    assert code == 2
    assert ("--transport: backend deepep_low_latency issues RDMA from the GPU (NVSHMEM IBGDA); transport ibrc needs "
            "nccl, deepep_normal or cpu_proxy") in err
    path = write(tmp_path, "m.yaml", SMALL + "moe:\n  backend: deepep_low_latency\n  transport: ibrc\n")
    code, _, err = cli("run", path)
    assert code == 2 and f"{path}:14: moe.transport: backend deepep_low_latency issues RDMA from the GPU" in err


def test_sweep_with_a_calibration_of_another_system(cli, tmp_path):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "h200.yaml").write_text(Path(CAL).read_text())
    text = SMALL.replace("  nodes: 1\n", "  nodes: 1\n  calibration: cal/h200.yaml\n") + "sweep:\n  parallel.tp: [4, 8]\n"
    path = write(tmp_path, "s.yaml", text)
    code, _, err = cli("sweep", path, "-o", tmp_path / "o.csv", "--no-progress")
    assert code == 2 and not (tmp_path / "o.csv").exists()
    assert f"{path}:4: system.calibration: " in err and "measured on 'h200_x2', not on 'dgx_h100'" in err
    code, out, _ = cli("sweep", path, "-o", tmp_path / "o.csv", "--no-progress", "--force-calibration")
    assert code == 0 and "2 plans -> " in out and "2 ok" in out


# Issue 27, item 3: three mistakes that exited 0.

def test_a_vocabulary_of_one_token_is_refused(cli, tmp_path):
    """Over one token the softmax is 1 whatever the logits: loss and gradient are 0 (ModelSpec.vocab: at least 2)."""
    path = write(tmp_path, "v.yaml", SMALL.replace("  preset: llama3-8b\n", "  preset: llama3-8b\n  vocab: 1\n"))
    code, _, err = cli("run", path)
    assert code == 2 and f"{path}:6: model.vocab: Input should be greater than or equal to 2" in err
    ok = write(tmp_path, "v2.yaml", SMALL.replace("  preset: llama3-8b\n", "  preset: llama3-8b\n  vocab: 2\n"))
    assert cli("run", ok)[0] == 0


@pytest.mark.parametrize(("section", "shown"), [("sweep: {}", "{}"), ("sweep:", "null"), ("zip: {}", "{}"),
                                                ("sweep: []", "[]")])
def test_an_empty_sweep_section_is_refused(cli, tmp_path, section, shown):
    path = write(tmp_path, "s.yaml", SMALL + section + "\n")
    key = section.split(":")[0]
    for argv in (("sweep", path, "-o", tmp_path / "o.csv"), ("run", path)):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and not (tmp_path / "o.csv").exists()
        assert f"{path}:12: {key}: the section is empty ({shown}); give dotted keys with value lists" in err


def test_sweep_of_a_file_without_a_sweep_is_refused(cli, tmp_path):
    path = write(tmp_path, "s.yaml", SMALL)
    code, out, err = cli("sweep", path, "-o", tmp_path / "o.csv")
    assert code == 2 and out == "" and not (tmp_path / "o.csv").exists()
    assert f"error: {path}: no sweep: or zip: section, so there is nothing to sweep" in err
    assert "or run the one plan with `simulator run`" in err
