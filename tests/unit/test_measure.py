"""The calibration kit (simulator.measure) without a GPU: log format, tuning-table extraction, settings, CLI."""

import sys

import numpy as np
import pytest

from simulator.collectives import parse_nccl_tests, parse_tuning_table
from simulator.measure.nccl_tests_format import Measurement, extract_tuning_table, format_log
from simulator.measure.settings import OPS, SETTINGS, ops_for, setting_env, sweep_sizes

DEBUG_LOG = """\
host:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
host:1234:1234 [0] NCCL INFO   Algorithm   |                            Tree                  |                            Ring                  |
host:1234:1234 [0] NCCL INFO   Protocol    |             LL |          LL128 |         Simple |             LL |          LL128 |         Simple |
host:1234:1234 [0] NCCL INFO  Max NThreads |            512 |            640 |            512 |            512 |            640 |            512 |
host:1234:1234 [0] NCCL INFO     Broadcast |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |     7.2/ 141.0 |    15.9/ 331.2 |    11.8/ 360.0 |
host:1234:1234 [0] NCCL INFO     AllReduce |     8.0/  61.1 |    16.5/ 180.6 |    16.4/ 232.2 |     7.8/ 141.0 |    17.8/ 331.2 |    15.2/ 360.0 |
host:1234:1234 [0] NCCL INFO comm 0x55 rank 0 nranks 2 - Init COMPLETE
"""


@pytest.mark.parametrize("op", OPS)
def test_format_log_round_trips_through_the_parser(tmp_path, op):
    rows = [Measurement(size, 10e-6 + size / 300e9) for size in sweep_sizes(256, 2**30, 4)]
    text = format_log(op, 2, rows, comments=["ranks 2  setting ll128  env NCCL_PROTO=LL128"])
    path = tmp_path / f"{op}_perf.ll128.txt"
    path.write_text(text)
    m = parse_nccl_tests(path)
    assert (m.op, m.setting, m.n_ranks) == (op, "ll128", 2)
    assert m.sizes_bytes == pytest.approx([r.size_bytes for r in rows])
    assert m.times_s == pytest.approx([r.time_s for r in rows], rel=1e-3, abs=0.01e-6)  # printed to 0.01 us


def test_format_log_busbw_column_uses_nccl_tests_factor():
    line = format_log("all_reduce", 4, [Measurement(2**20, 1e-5)]).splitlines()[-1].split()
    algbw, busbw = float(line[6]), float(line[7])
    assert busbw == pytest.approx(algbw * 2 * 3 / 4, rel=1e-2)
    assert int(format_log("all_gather", 4, [Measurement(2**20, 1e-5)]).splitlines()[-1].split()[1]) == 2**20 // 2 // 4


def test_extract_tuning_table_from_a_debug_log(tmp_path):
    table = extract_tuning_table(DEBUG_LOG)
    assert "Bootstrap" not in table and "Init COMPLETE" not in table
    assert table.splitlines()[0].strip().startswith("Algorithm")
    path = tmp_path / "nccl_tuning_table.default.txt"
    path.write_text(table)
    parsed = parse_tuning_table(path).entries
    assert parsed["all_reduce"]["ring"]["simple"] == (15.2, 360.0)
    assert parsed["broadcast"]["ring"]["ll128"] == (15.9, 331.2)
    assert extract_tuning_table("no table here\n") == ""


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_nvls_stays_off_unless_asked(setting):
    env = setting_env(setting)
    assert env["NCCL_NVLS_ENABLE"] == ("1" if setting == "nvls" else "0")
    assert {k: v for k, v in env.items() if k != "NCCL_NVLS_ENABLE"} == {
        k: v for k, v in SETTINGS[setting].items() if k != "NCCL_NVLS_ENABLE"}


def test_settings_and_sweep():
    assert ops_for("tree", OPS) == ("all_reduce",)
    assert ops_for("default", OPS) == OPS
    assert sweep_sizes(256, 4096, 4) == [256, 1024, 4096]
    assert np.diff(sweep_sizes()).min() > 0
    from simulator.errors import UserError

    with pytest.raises(UserError):
        setting_env("fast")
    with pytest.raises(UserError):
        sweep_sizes(1024, 256)


@pytest.mark.parametrize("argv", [["measure", "gemm", "--out", "g.csv"],
                                  ["measure", "collectives", "--out", "logs"]])
def test_measure_without_torch_exits_2_with_a_clear_message(monkeypatch, capsys, tmp_path, argv):
    from simulator.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError, torch installed or not
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "PyTorch" in err and "Traceback" not in err
    assert not (tmp_path / "logs").exists()


def test_measure_rejects_unknown_setting_before_needing_torch(capsys):
    from simulator.cli import main

    assert main(["measure", "collectives", "--out", "x", "--settings", "default,fast"]) == 2
    assert "fast" in capsys.readouterr().err


def test_the_kits_busbw_factors_are_the_models():
    """simulator.measure stays free of pydantic/networkx (it runs on GPU machines with PyTorch only), so it keeps its
    own copy of the nccl-tests factors; this keeps the two copies equal."""
    from simulator.collectives import busbw_factor
    from simulator.measure.nccl_tests_format import BUSBW_FACTOR

    for op, factor in BUSBW_FACTOR.items():
        for n in (2, 3, 8, 64):
            assert factor(n) == busbw_factor(op, n), (op, n)
