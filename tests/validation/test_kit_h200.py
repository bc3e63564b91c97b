"""Issue 8 at 2 GPUs: calibrate on all_reduce + sendrecv only, predict the other operations (2x H200, own kit).

Data: simulator/validation/data/h200x2_kit (README.md there: 6 operations x NCCL settings, NCCL 2.28.9, NVLS off). The calibration
keeps collective channels (fitted on all_reduce) and p2p channels (fitted on sendrecv) apart; all_gather,
reduce_scatter and broadcast are predicted from the collective entries, all_to_all from the p2p entry.
Gates: median |error| <= 10% for sizes >= 1 MiB per operation (all settings pooled), and per (operation,
setting) on NVLink. Reported, not gated: sizes < 1 MiB, the shm (NCCL_P2P_DISABLE=1) settings per setting, and
NCCL's own tuner (nccl_tuning_table.<setting>.txt; it has no p2p rows, so none for all_to_all).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.collectives import load_calibration
from simulator.validation import VALIDATION_DATA
from simulator.validation.collectives import median_abs, pooled_median, predicted_vs_measured

DATA = VALIDATION_DATA / "h200x2_kit"
TARGETS = ("all_gather", "reduce_scatter", "broadcast", "all_to_all")
MiB = 2**20


def _fit_files():
    return sorted(DATA.glob("all_reduce_perf.*.txt")) + sorted(DATA.glob("sendrecv_perf.*.txt"))


@pytest.fixture(scope="module")
def errors():
    """{(op, setting): (sizes, our signed error, NCCL tuner signed error or None)} (simulator.validation)."""
    return predicted_vs_measured("h200x2_kit", ("all_reduce", "sendrecv"), TARGETS)


#: the (operation, setting) rows of docs/validation/collectives.md [kit]
DOCUMENTED_ROWS = {(op, s) for op in ("all_gather", "reduce_scatter") for s in ("default", "ll", "ll128", "ring", "shm", "simple")} \
    | {(op, s) for op in ("broadcast", "all_to_all") for s in ("default", "ring", "simple")}


def test_error_table_holds_the_documented_medians(errors):
    """README: other operations within 4.9-6.2% median (sizes >= 1 MiB, settings pooled) after calibrating on
    all_reduce + sendrecv; NCCL's own tuner 23-38% on every all_gather and reduce_scatter setting."""
    lines = ["\n2x H200 (own kit), calibrated on all_reduce + sendrecv only (median |error|):",
             f"{'op':15s} {'setting':8s} {'ours >=1MiB':>12s} {'ours <1MiB':>11s} {'NCCL >=1MiB':>12s} {'NCCL <1MiB':>11s}"]
    for (op, s), (sizes, ours, nccl) in errors.items():
        lines.append(f"{op:15s} {s:8s} {100 * median_abs(sizes, ours):11.1f}% {100 * median_abs(sizes, ours, False):10.1f}% "
                     f"{100 * median_abs(sizes, nccl):11.1f}% {100 * median_abs(sizes, nccl, False):10.1f}%")
    for op in TARGETS:
        lines.append(f"{op:15s} {'pooled':8s} {100 * pooled_median(errors, op):11.1f}% {100 * pooled_median(errors, op, False):10.1f}%")
    print("\n".join(lines))
    assert set(errors) == DOCUMENTED_ROWS
    pooled = {op: round(pooled_median(errors, op), 3) for op in TARGETS}
    assert max(pooled.values()) <= 0.0625, f"pooled medians {pooled} (README: 4.9-6.2%)"
    nccl = {k: round(median_abs(v[0], v[2]), 3) for k, v in errors.items() if k[0] in ("all_gather", "reduce_scatter")}
    assert all(0.225 <= x <= 0.38 for x in nccl.values()), f"NCCL tuner medians {nccl} (README: 23-38%)"


@pytest.mark.parametrize("op", TARGETS)
def test_each_operation_within_10_percent_above_1mib(errors, op):
    assert pooled_median(errors, op) <= 0.10, f"{op}: median error {pooled_median(errors, op):.1%} for sizes >= 1 MiB"


def test_each_nvlink_setting_within_10_percent_above_1mib(errors):
    bad = {k: round(median_abs(v[0], v[1]), 3) for k, v in errors.items() if k[1] != "shm" and median_abs(v[0], v[1]) > 0.10}
    assert not bad, f"median error > 10% for sizes >= 1 MiB: {bad}"


def test_shm_is_reported_not_gated(errors):
    """shm (host memory) per setting: all_gather ~14%, reduce_scatter ~13% too slow; the single all_reduce shm
    fit (7.9% median, 37% max on its own file) does not transfer better. Guard against getting worse."""
    for op in ("all_gather", "reduce_scatter"):
        sizes, ours, _ = errors[(op, "shm")]
        assert median_abs(sizes, ours) <= 0.20


def test_better_than_nccl_tuner_where_it_has_rows(errors):
    keys = [k for k, v in errors.items() if v[2] is not None]
    ours = np.concatenate([np.abs(errors[k][1][errors[k][0] >= MiB]) for k in keys])
    nccl = np.concatenate([np.abs(errors[k][2][errors[k][0] >= MiB]) for k in keys])
    assert np.median(ours) < np.median(nccl)


def test_cli_calibrate_then_collective(tmp_path):
    """The issue's command line: exit 0, a YAML that `simulator collective --calibration` accepts."""
    from simulator.cli import main

    out = tmp_path / "cal.yaml"
    files = [str(f) for f in _fit_files()]
    assert main(["calibrate", "--system", "h200_x2", "--ranks", "2", "--no-nvls", *files, "--out", str(out)]) == 0
    cal = load_calibration(out)
    assert {e.path for e in cal.entries} == {"collective", "p2p"}
    for op in ("sendrecv", "all_to_all", "broadcast"):
        assert main(["collective", "--system", "h200_x2", "--ranks", "2", "--no-nvls", "--op", op,
                     "--bytes", "1MiB,1GiB", "--calibration", str(out), "--json"]) == 0


def test_cli_calibrate_in_a_subprocess(tmp_path):
    """As a user runs it (console entry point, files by glob in the data directory)."""
    out = tmp_path / "cal.yaml"
    files = [f.name for f in _fit_files()]
    run = subprocess.run([sys.executable, "-m", "simulator", "calibrate", "--system", "h200_x2", "--ranks", "2",
                          "--no-nvls", *files, "--out", str(out)], cwd=DATA, capture_output=True, text=True,
                         env={"PYTHONPATH": str(Path(__file__).parents[2]), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert "sendrecv_perf.ll128.txt" in run.stdout and out.exists()
