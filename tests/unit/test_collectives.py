"""Unit checks of the collective cost model with hand-computed numbers."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.collectives import (
    Calibration,
    CalibrationEntry,
    build_cost_model,
    busbw_factor,
    calibration_to_yaml,
    collective_table,
    evaluate,
    format_coefficients,
    load_calibration,
    nccl_tuner_time,
    nic_message_time,
    parse_nccl_tests,
    parse_tuning_table,
    placement_for_profile,
    ring_pass,
)
from simulator.errors import UserError
from simulator.validation import VALIDATION_DATA

DATA = VALIDATION_DATA / "h200x2"


def test_busbw_factors():
    assert busbw_factor("all_reduce", 8) == pytest.approx(14 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("all_to_all", 4) == pytest.approx(3 / 4)
    assert busbw_factor("broadcast", 8) == 1.0 and busbw_factor("sendrecv", 8) == 1.0


def test_ring_all_reduce_dgx_a100_by_hand():
    # 240 GB/s = 12 links x 25 GB/s x 20/25; latency 8.4 + 14 x 3.4 = 56 us (Simple, NVLink);
    # bandwidth regime (14 + 0.5)/8 of S over 240 GB/s.
    model = build_cost_model(placement_for_profile("dgx_a100_80gb", 8))
    t = evaluate(model, "all_reduce", [2**30], "ring", "simple").times_s[0]
    assert t == pytest.approx(56e-6 + 14.5 / 8 * 2**30 / 240e9, rel=1e-9)


def test_nvls_busbw_dgx_h100_by_hand():
    # 2 x 370.8 x 0.85 x (k-1)/(k+1), k = 8 -> 490.28 GB/s bus bandwidth; latency 25 us; plus the pipeline fill
    # of two loops of 16 channels x 8 heads x chunk (128 KiB from 1 GiB up, 64 KiB from 64 MiB up; enqueue.cc).
    model = build_cost_model(placement_for_profile("dgx_h100", 8))
    bus = 2 * 370.8e9 * 0.85 * 7 / 9
    for size, chunk in ((2**34, 2**17), (2**30, 2**17), (2**27, 2**16)):
        t = evaluate(model, "all_reduce", [size], "nvls").times_s[0]
        assert t == pytest.approx(25e-6 + (size + 2 * 128 * chunk) * 14 / 8 / bus, rel=1e-9)
    # 128 MiB: 8 MiB loops, 16 MiB of fill -> 416.5 GB/s busbw (485.7 at 4 GiB); "256M is too small to reach
    # peak bandwidth" on 8 H100 with NVLS (sjeaugey, NVIDIA/nccl-tests#212)
    t = evaluate(model, "all_reduce", [2**27], "nvls").times_s[0]
    assert 2**27 / t * 14 / 8 == pytest.approx(416.5e9, rel=5e-4)


def test_message_rate_proxy_vs_ibgda():
    # 1000 tokens of 7 KiB: bytes alone 7.168 MB / 47 GB/s = 152.5 us; proxy 1000 / (50e9/32768) = 655.36 us,
    # IBGDA 1000 / (50e9/8192) = 163.84 us; 1000 x 1 MiB is bandwidth-bound under both.
    assert nic_message_time(1000, 7168, 50e9, "cpu_proxy") == pytest.approx(655.36e-6)
    assert nic_message_time(1000, 7168, 50e9, "ibgda") == pytest.approx(163.84e-6)
    big = 1000 * 2**20 / 47e9
    assert nic_message_time(1000, 2**20, 50e9, "cpu_proxy") == pytest.approx(big)
    assert nic_message_time(1000, 2**20, 50e9, "ibgda") == pytest.approx(big)


def test_forcing_infeasible_is_a_user_error():
    with pytest.raises(UserError, match="NVLS"):
        evaluate(build_cost_model(placement_for_profile("dgx_a100_80gb", 8)), "all_reduce", [1e6], "nvls")
    with pytest.raises(UserError, match="LL128"):
        evaluate(build_cost_model(placement_for_profile("rtx3090_x4_pcie", 4)), "all_reduce", [1e6], "ring", "ll128")
    with pytest.raises(UserError, match="PAT"):
        evaluate(build_cost_model(placement_for_profile("dgx_h100", 16, 8)), "all_gather", [1e6], "pat")
    with pytest.raises(UserError, match="accepted"):
        evaluate(build_cost_model(placement_for_profile("dgx_h100", 8)), "gather", [1e6])


def test_single_rank_group_costs_nothing():
    ev = evaluate(build_cost_model(placement_for_profile("dgx_h100", 1)), "all_reduce", [1e6, 1e9])
    assert np.all(ev.times_s == 0)


def test_parse_logs_op_and_setting(tmp_path):
    m = parse_nccl_tests(DATA / "all_reduce_perf.default.txt")
    assert (m.op, m.setting, m.n_ranks, len(m.sizes_bytes)) == ("all_reduce", "default", 2, 10)
    assert m.times_s[-1] == pytest.approx(248.75e-6)
    bare = tmp_path / "all_gather_perf.ll.txt"
    bare.write_text("\n".join(line for line in (DATA / "all_reduce_perf.ll.txt").read_text().splitlines()
                              if not line.startswith("#")))
    m2 = parse_nccl_tests(bare)
    assert (m2.op, m2.setting, m2.n_ranks) == ("all_gather", "ll", None)
    assert parse_nccl_tests(bare, op="reduce_scatter").op == "reduce_scatter"


def test_nccl_tuning_table_and_its_prediction():
    table = parse_tuning_table(DATA / "nccl_tuning_table.txt")
    assert table.entries["all_reduce"]["ring"]["simple"] == (15.2, 360.0)
    # The numbers: 64 MiB all_reduce 15.2 + 67108864/360000 = 201.6 us; all_gather 11.8 + .../720000 = 105 us.
    assert nccl_tuner_time(table, "all_reduce", 2**26) == pytest.approx(201.6e-6, rel=1e-3)
    assert nccl_tuner_time(table, "all_gather", 2**26) == pytest.approx(105.0e-6, rel=1e-2)


def test_calibration_yaml_round_trip_and_effect(tmp_path):
    entry = CalibrationEntry(link_class="nvlink", protocol="simple", latency_s=20e-6, small_bw_Bps=500e9,
                             fill_latency_s=19e-6, bandwidth_Bps=300e9)
    cal = Calibration(system="test", entries=(entry,))
    path = tmp_path / "cal.yaml"
    path.write_text(calibration_to_yaml(cal))
    assert load_calibration(path) == cal
    placement = placement_for_profile("h200_x2", 2, nvls=False)
    t = evaluate(build_cost_model(placement, calibration=cal), "all_reduce", [2**30], "ring", "simple").times_s[0]
    assert t == pytest.approx(19e-6 + 2.5 / 2 * 2**30 / 300e9, rel=1e-9)
    path.write_text("entries: [{link_class: nvlink, protocol: simple, bogus: 1}]")
    with pytest.raises(UserError):
        load_calibration(path)


def test_ring_pass_overlap_hook():
    model = build_cost_model(placement_for_profile("dgx_h100", 8))
    full = ring_pass(model, 2**24)
    assert full.step_comm_s.shape == (7,) and full.total_exposed_s == pytest.approx(full.total_comm_s)
    hidden = ring_pass(model, 2**24, compute_s=1.0)
    assert hidden.total_exposed_s == 0.0
    hooked = ring_pass(model, 2**24, overlap=lambda i, comm, comp: comm / 2)
    assert hooked.total_exposed_s == pytest.approx(full.total_comm_s / 2)


def test_table_keys_and_all_algorithms():
    rows = collective_table(placement_for_profile("dgx_h100", 8), "all_reduce", [1024, 2**30], "all")
    assert set(rows[0]) == {"op", "bytes", "ranks", "time_us", "algbw_GBps", "busbw_GBps", "algorithm", "protocol"}
    # NCCL's three, and the custom one-/two-shot kernels beside them (never NCCL's auto choice)
    assert {r["algorithm"] for r in rows} == {"ring", "tree", "nvls", "one_shot", "two_shot"}


def test_coefficients_print_with_sources():
    text = format_coefficients()
    assert "tuning.cc" in text and text.count("source:") > 20


def test_package_import_is_light():
    code = ("import sys, simulator.collectives; "
            "print([m for m in ('matplotlib', 'pandas') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "[]"


def test_plot_busbw_writes_png(tmp_path):
    from simulator.collectives import plot_busbw

    rows = collective_table(placement_for_profile("dgx_h100", 8), "all_reduce", [2**k for k in range(10, 31, 4)],
                            "all")
    plot_busbw(rows, str(tmp_path / "busbw.png"))
    assert (tmp_path / "busbw.png").stat().st_size > 1000


def test_shipped_h200_calibration_loads():
    cal = load_calibration(Path(__file__).parents[2] / "hardware_profiles" / "calibration" / "h200_x2.yaml")
    assert {(e.link_class, e.protocol) for e in cal.entries} >= {("nvlink", "simple"), ("shm", "auto")}


def test_nvls_fill_is_a_step_uncalibrated_and_absent_from_a_calibrated_line():
    """DGX H100 (16 x 8 = 128 concurrent ops): the chunk is 32 KiB below 64 MiB and 64 KiB from 64 MiB up, so the
    uncalibrated fill jumps from 2 x 4 MiB to 2 x 8 MiB there; a calibrated NVLink Simple line already holds the
    measured fill, and its NVLS time stays one straight line across the step."""
    from simulator.hardware.calibration import Calibration, CalibrationEntry

    placement = placement_for_profile("dgx_h100", 8)
    sizes = np.array([32.0, 64.0, 96.0]) * 2**20
    t = evaluate(build_cost_model(placement), "all_reduce", sizes, "nvls").times_s
    bus = 2 * 370.8e9 * 0.85 * 7 / 9
    assert (t[1] - t[0]) - (t[2] - t[1]) == pytest.approx(2 * 4 * 2**20 * 14 / 8 / bus, rel=1e-6)
    entry = CalibrationEntry(link_class="nvlink", protocol="simple", latency_s=2e-5, small_bw_Bps=3e11,
                             fill_latency_s=3e-5, bandwidth_Bps=3e11)
    model = build_cost_model(placement, calibration=Calibration(entries=(entry,)))
    t = evaluate(model, "all_reduce", sizes, "nvls").times_s
    assert t[1] - t[0] == pytest.approx(t[2] - t[1], rel=1e-9)


def test_nvls_tree_pays_the_same_two_loops_with_its_own_chunk_rule():
    """2x DGX H100 (NVLS tree, 16 ranks): 16 multi-node channels x 8 heads = 128 ops, chunk min(128 KiB, 128 KiB on
    2 nodes), no NVLS-tree step below (4 GiB >= 32 x 128 x 128 KiB = 512 MiB): the fill is 2 x 16 MiB; at 32 MiB the
    chunk steps to 64 KiB (32 MiB < 4 x 128 x 128 KiB = 64 MiB, not < 1 x 128 x 64 KiB = 8 MiB) -> 2 x 8 MiB."""
    from simulator.collectives.algorithms import nvls_tree_loop_bytes

    assert list(nvls_tree_loop_bytes([2.0**32, 2.0**25], 128, 2**17)) == [128 * 2**17, 128 * 2**16]
    model = build_cost_model(placement_for_profile("dgx_h100", 16, 8))
    sizes = np.array([2.0**32, 2.0**25])
    fill = evaluate(model, "all_reduce", sizes, "nvls_tree").times_s
    no_fill = np.array([model.tables["all_reduce"].terms[i] for i, (a, p) in enumerate(
        zip(model.tables["all_reduce"].algorithms, model.tables["all_reduce"].protocols, strict=True))
        if a == "nvls_tree" and p == "simple"][0])
    line = no_fill[2] + no_fill[3] * sizes
    assert fill - line == pytest.approx(2 * no_fill[3] * np.array([16, 8]) * 2**20, rel=1e-9)


def test_auto_chooses_by_nccls_tuner_terms_and_prices_the_fill():
    """DGX H100, 8 ranks, 2 MiB all_reduce: without the fill NVLS (25 us + 2 MiB x 1.75 / 490.28 GB/s = 32.5 us) beats
    the ring (42.0 us), so NCCL's tuner picks it and so does the model's auto; it then runs with two loops of fill,
    each one 2 MiB loop (16 KiB chunks x 128: 2 MiB < 2 x 128 x 32 KiB): 25 + 6 MiB x 1.75 / 490.28 GB/s = 47.5 us,
    slower than the ring row it did not choose."""
    model = build_cost_model(placement_for_profile("dgx_h100", 8))
    auto = evaluate(model, "all_reduce", [2.0**21])
    bus = 2 * 370.8e9 * 0.85 * 7 / 9
    assert auto.algorithms[0] == "nvls"
    assert auto.times_s[0] == pytest.approx(25e-6 + 3 * 2**21 * 1.75 / bus, rel=1e-9)
    assert evaluate(model, "all_reduce", [2.0**21], "ring").times_s[0] < auto.times_s[0]
