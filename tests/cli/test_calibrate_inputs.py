"""Issue 27, item 1: `simulator calibrate` checks its nccl-tests logs as strictly as a scenario. Every degenerate
log exits 2 with the file, the line and what is wrong (never LinAlgError, exit 1), and no fit that describes
impossible hardware (a link faster than NVLink or the NICs, a negative latency) is written."""

import numpy as np
import pytest

from simulator.collectives import calibrate, placement_for_profile
from simulator.collectives.fit import MAX_SPLITS, fit_two_regime, split_points
from simulator.collectives.nccl_logs import MIN_LOG_SIZES, parse_nccl_tests
from simulator.errors import UserError
from simulator.limits import MAX_LOG_BYTES, MAX_LOG_SIZES
from simulator.measure.nccl_tests_format import Measurement, format_log
from simulator.validation import VALIDATION_DATA

REAL = VALIDATION_DATA / "h200x2" / "all_reduce_perf.default.txt"  # 2x H200, NVLS off; data lines are 8-17
FIRST_DATA_LINE = 8


def calibrate_cli(cli, tmp_path, log, *extra, system=("h200_x2", "2")):
    out = tmp_path / "c.yaml"
    code, stdout, err = cli("calibrate", "--system", system[0], "--ranks", system[1], *extra, log, "--out", out)
    return code, err, out


def real_with(tmp_path, line_no, column, value, name="all_reduce_perf.default.txt"):
    """The real H200 log with one token of one line replaced (column 5: the out-of-place time in us)."""
    lines = REAL.read_text().splitlines()
    tok = lines[line_no - 1].split()
    tok[column] = value
    lines[line_no - 1] = "  ".join(tok)
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def synthetic(tmp_path, times_s, sizes=None, op="all_reduce", ranks=2, name=None):
    sizes = sizes or [256 << (2 * i) for i in range(len(times_s))]
    path = tmp_path / (name or f"{op}_perf.default.txt")
    path.write_text(format_log(op, ranks, [Measurement(s, t) for s, t in zip(sizes, times_s, strict=True)]))
    return path


@pytest.mark.parametrize("value", ["nan", "0", "0.00", "-14.23", "inf", "-inf", "1e999"])
def test_a_time_that_is_not_finite_and_positive_is_located(cli, tmp_path, value):
    """The issue's logs: nan and a single 0 died with LinAlgError (exit 1); negative times were written as a 1e15 B/s
    link; inf as `latency_s: .inf`."""
    log = real_with(tmp_path, FIRST_DATA_LINE + 1, 5, value)
    code, err, out = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and not out.exists()
    assert f"error: {log}:{FIRST_DATA_LINE + 1}: time " in err
    assert "a time must be a finite number of microseconds, at least 0.01" in err


def test_every_time_negative_is_refused(cli, tmp_path):
    lines = [line if line.startswith("#") else line.replace("    1", "   -1").replace("  14.61", " -14.61")
             for line in REAL.read_text().splitlines()]
    log = tmp_path / "all_reduce_perf.default.txt"
    log.write_text("\n".join(lines) + "\n")
    code, err, out = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and not out.exists() and f"{log}:{FIRST_DATA_LINE}: time -14.61 us at size 256" in err


@pytest.mark.parametrize(("value", "message"), [
    ("0", "size 0 bytes: a size must be between 1 byte and 1 PiB"),
    ("1125899906842625", "size 1125899906842625 bytes: a size must be between 1 byte and 1 PiB"),
    ("256", "size 256 bytes after 256 on line 8: sizes must grow line by line"),
    ("100", "size 100 bytes after 256 on line 8: sizes must grow line by line"),
])
def test_a_size_that_is_not_positive_or_does_not_grow_is_located(cli, tmp_path, value, message):
    log = real_with(tmp_path, FIRST_DATA_LINE + 1, 0, value)
    code, err, _ = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and f"{log}:{FIRST_DATA_LINE + 1}: {message}" in err


def test_a_time_that_falls_by_half_as_the_size_grows_is_refused(cli, tmp_path):
    log = real_with(tmp_path, 16, 5, "50.00")  # 16 MiB after 4 MiB at 33.49 us is fine, 64 MiB at 50 after 76.56 not
    assert calibrate_cli(cli, tmp_path, log)[0] == 0
    log = real_with(tmp_path, 17, 5, "38.00")
    code, err, _ = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and f"{log}:17: time 38 us at size 67108864 is less than 0.5 x the 76.56 us of a smaller size" in err


def test_real_jitter_of_the_latency_regime_is_accepted():
    """14.61 us at 256 B then 14.23 us at 1 KiB (the real log): jitter, not an error."""
    m = parse_nccl_tests(REAL)
    assert m.times_s[1] < m.times_s[0] and len(m.sizes_bytes) == 10


@pytest.mark.parametrize("count", [1, 2])
def test_too_few_sizes(cli, tmp_path, count):
    log = synthetic(tmp_path, [20e-6 * (i + 1) for i in range(count)])
    code, err, _ = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and f"{log}: {count} size(s); a fit needs at least {MIN_LOG_SIZES}" in err


def test_times_that_do_not_grow_cannot_give_a_bandwidth(cli, tmp_path):
    log = synthetic(tmp_path, [20e-6] * 6)
    code, err, out = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and not out.exists()
    assert f"{log}: all_reduce times do not grow with the size at the largest sizes" in err


def test_unreadable_data_line_is_cut(cli, tmp_path):
    log = real_with(tmp_path, FIRST_DATA_LINE + 2, 5, "x" * 5000)
    code, err, _ = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and f"{log}:{FIRST_DATA_LINE + 2}: unreadable data line: '" in err and len(err) < 400


def test_binary_and_oversized_files(cli, tmp_path):
    png = tmp_path / "all_reduce_perf.default.txt"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    code, err, _ = calibrate_cli(cli, tmp_path, png)
    assert code == 2 and f"{png}: not a UTF-8 text file (byte 0 is not UTF-8)" in err
    big = tmp_path / "all_gather_perf.default.txt"
    with big.open("wb") as f:
        f.truncate(MAX_LOG_BYTES + 1)  # sparse: no 16 MiB written
    code, err, _ = calibrate_cli(cli, tmp_path, big)
    assert code == 2 and f"{big}: file is over 16,777,216 bytes; nccl-tests logs are limited to 16,777,216" in err
    code, err, _ = calibrate_cli(cli, tmp_path, tmp_path)
    assert code == 2 and "is a folder, not an nccl-tests log" in err


def test_too_many_sizes(tmp_path):
    sizes = list(range(1 << 20, (1 << 20) * (MAX_LOG_SIZES + 2), 1 << 20))
    log = synthetic(tmp_path, [10e-6 + s / 300e9 for s in sizes], sizes=sizes)
    with pytest.raises(UserError, match=f"more than {MAX_LOG_SIZES:,} data lines") as exc:
        parse_nccl_tests(log)
    assert exc.value.line == 5 + MAX_LOG_SIZES + 1  # five comment lines, then the first data line past the limit


def test_a_dense_sweep_is_fitted_on_a_bounded_number_of_splits():
    """Linear time: the quadratic step was fit_two_regime trying every split (two least squares each); a doubling
    sweep keeps every split, a stepped one MAX_SPLITS of them."""
    doubling = np.array([2.0**i for i in range(51)])  # 1 B .. 1 PiB
    assert list(split_points(doubling)) == list(range(2, 50))
    dense = np.arange(1, MAX_LOG_SIZES + 1) * 2.0**20
    splits = split_points(dense)
    assert len(splits) <= MAX_SPLITS and splits.min() >= 2 and splits.max() <= len(dense) - 2
    times = np.maximum(12e-6 + dense / 1e12, 5e-6 + dense / 300e9)
    small, big = fit_two_regime(dense, times)
    assert big[1] == pytest.approx(1 / 300e9, rel=1e-3)


def test_a_link_faster_than_nvlink_is_refused(cli, tmp_path):
    """A 2-rank all_reduce at 1 TB/s of algorithm bandwidth needs a ring link over 1 TB/s (the model's ring turns it
    into 1,250 GB/s, as it turns the real log's 270 GB/s into 396); the H200's NVLink is 18 x 25 GB/s."""
    sizes = [1 << (10 + 2 * i) for i in range(11)]
    log = synthetic(tmp_path, [10e-6 + s / 1e12 for s in sizes], sizes=sizes)
    code, err, out = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and not out.exists()
    assert (f"error: {log}: refused: nvlink auto bandwidth 1,250.0 GB/s is faster than the GPU's NVLink line rate "
            "(450.0 GB/s per direction)") in err


def test_a_network_faster_than_the_nics_is_refused(tmp_path):
    """dgx_h100, 16 ranks on two nodes: 8 NICs of 50 GB/s per node; a fit of 2 TB/s per node is refused."""
    sizes = [1 << (10 + 2 * i) for i in range(11)]
    ranks = 16
    bus = 2 * (ranks - 1) / ranks  # nccl-tests all_reduce: each rank sends 2(n-1)/n of the size
    log = synthetic(tmp_path, [150e-6 + bus * s / 2e12 for s in sizes], sizes=sizes, ranks=ranks)
    with pytest.raises(UserError, match="net auto bandwidth .* is faster than the line rate of the node's 8 NIC") as exc:
        calibrate([log], placement_for_profile("dgx_h100", 16, 8))
    assert exc.value.file == str(log)


def test_a_negative_latency_is_refused(cli, tmp_path):
    """Times on a line that crosses zero above 0 bytes (t = S / 10 GB/s - 2 us) fit a latency below zero: refused,
    naming it, instead of being written."""
    sizes = [1 << (16 + 2 * i) for i in range(8)]
    log = synthetic(tmp_path, [s / 10e9 - 2e-6 for s in sizes], sizes=sizes)
    code, err, out = calibrate_cli(cli, tmp_path, log)
    assert code == 2 and not out.exists()
    assert f"{log}: negative latency: the small sizes' times extrapolate to -2 us at 0 bytes" in err


def test_a_setting_the_operation_does_not_have_is_refused(tmp_path):
    log = synthetic(tmp_path, [10e-6 + (256 << 2 * i) / 200e9 for i in range(8)], op="all_gather",
                    name="all_gather_perf.tree.txt")
    with pytest.raises(UserError, match="all_gather has no tree algorithm with the simple protocol") as exc:
        calibrate([log], placement_for_profile("h200_x2", 2))
    assert exc.value.file == str(log)


def test_the_shipped_kit_still_calibrates_within_bounds():
    """The real logs (2x H200) pass every check and give the shipped numbers' order: NVLink simple 396 GB/s."""
    kit = VALIDATION_DATA / "h200x2_kit"
    files = sorted(kit.glob("all_reduce_perf.*.txt")) + sorted(kit.glob("sendrecv_perf.*.txt"))
    calibration, errors = calibrate(files, placement_for_profile("h200_x2", 2, nvls=False))
    simple = calibration.lookup("nvlink", "simple")
    assert simple.bandwidth_Bps == pytest.approx(396.085e9, rel=1e-5) and len(errors) == len(files)


def test_a_calibration_too_large_to_load_back_is_not_written(cli, tmp_path):
    """p2p fits keep their measured points; logs of many distinct sizes would make a calibration over the 1 MiB a
    calibration file may have (simulator.yamlio): refused before writing, since it could not be read back."""
    logs = []
    for k in range(7):
        sizes = [(i * 7 + k + 1) << 12 for i in range(MAX_LOG_SIZES)]
        log = tmp_path / f"sendrecv_perf.run{k}.txt"
        log.write_text(format_log("sendrecv", 2, [Measurement(s, 10e-6 + s / 200e9) for s in sizes]))
        logs.append(log)
    out = tmp_path / "c.yaml"
    code, _, err = cli("calibrate", "--system", "h200_x2", "--ranks", "2", *logs, "--out", out)
    assert code == 2 and not out.exists()
    assert f"error: {out}: the calibration would be " in err and "over the 1,048,576 a calibration file may have" in err
