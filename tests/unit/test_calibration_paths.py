"""Calibration paths: collective vs p2p entries, old YAMLs, NCCL's p2p protocol rules, measured p2p curves."""

from pathlib import Path

import numpy as np
import pytest

from simulator.collectives import (
    Calibration,
    CalibrationEntry,
    build_cost_model,
    calibrate,
    evaluate,
    load_calibration,
    placement_for_profile,
    ring_pass,
)
from simulator.collectives.curves import Curve, pool_points
from simulator.collectives.fit import setting_context
from simulator.validation import VALIDATION_DATA

ROOT = Path(__file__).parents[2]
KIT = VALIDATION_DATA / "h200x2_kit"
OLD = """system: old
entries:
- {link_class: nvlink, protocol: simple, latency_s: 2.2e-05, small_bw_Bps: 7.4e+11, fill_latency_s: 1.95e-05,
   bandwidth_Bps: 3.6e+11}
"""


@pytest.fixture(scope="module")
def placement():
    return placement_for_profile("h200_x2", 2, nvls=False)


def test_old_yaml_without_path_is_collective_only(tmp_path, placement):
    path = tmp_path / "old.yaml"
    path.write_text(OLD)
    cal = load_calibration(path)
    assert cal.entries[0].path == "collective" and cal.entries[0].curve == ()
    assert cal.lookup("nvlink", "simple", "p2p") is None
    # p2p rows never borrow a collective fit: sendrecv is the uncalibrated model's
    plain = evaluate(build_cost_model(placement), "sendrecv", [2**30]).times_s
    assert evaluate(build_cost_model(placement, calibration=cal), "sendrecv", [2**30]).times_s == pytest.approx(plain)


def test_shipped_calibration_has_both_paths():
    cal = load_calibration(ROOT / "hardware_profiles" / "calibration" / "h200_x2.yaml")
    assert {(e.link_class, e.path) for e in cal.entries} >= {("nvlink", "collective"), ("nvlink", "p2p"),
                                                            ("shm", "p2p")}


@pytest.mark.parametrize("setting", ["ll", "ll128", "simple", "ring", "tree", "default"])
def test_p2p_ignores_forced_protocol_and_algorithm(placement, setting):
    for op in ("sendrecv", "all_to_all"):
        assert setting_context(placement, setting, op)[2:] == ("auto", "auto")
    assert setting_context(placement, "ll128", "all_reduce")[2] == "ll128"
    assert setting_context(placement, "shm", "sendrecv")[1] == "shm"


def test_sendrecv_ll128_log_calibrates_p2p(placement):
    cal, errors = calibrate([KIT / "sendrecv_perf.ll128.txt"], placement)
    (entry,) = cal.entries
    assert (entry.path, entry.protocol, entry.link_class) == ("p2p", "auto", "nvlink")
    assert errors[0].median_abs_error < 0.02  # the measured curve is interpolated


def test_curve_interpolates_and_extrapolates():
    curve = Curve.from_points([(1e3, 10e-6), (1e6, 20e-6), (2e6, 30e-6)])
    assert curve.time([1.0, 1e6]) == pytest.approx([10e-6, 20e-6])
    assert curve.time(4e6) == pytest.approx(50e-6)  # last slope: 10 us per MB
    assert 10e-6 < curve.time(3e4) < 20e-6
    assert np.array(pool_points([[(1, 1.0)], [(1, 4.0), (2, 3.0)]])).ravel() == pytest.approx([1, 2, 2, 3])


def test_p2p_protocol_choice_follows_nccl_threshold(placement):
    entry = CalibrationEntry(link_class="nvlink", protocol="auto", path="p2p", latency_s=14e-6, small_bw_Bps=3e11,
                             fill_latency_s=14e-6, bandwidth_Bps=3.6e11,
                             curve=((256, 14e-6), (2**20, 23e-6), (2**30, 2.98e-3)))
    model = build_cost_model(placement, calibration=Calibration(entries=(entry,)))
    ev = evaluate(model, "sendrecv", [4096, 16384, 65536, 2**30])
    assert ev.protocols == ("ll", "ll", "simple", "simple")
    assert ev.times_s[-1] == pytest.approx(2.98e-3)
    a2a = evaluate(model, "all_to_all", [2**31]).times_s[0]  # 2 ranks: one exchange of S/2
    assert a2a == pytest.approx(2.98e-3)
    full = ring_pass(model, 2**30)
    assert full.total_comm_s == pytest.approx(2.98e-3)


def test_collective_entry_does_not_move_p2p_and_vice_versa(placement):
    coll = CalibrationEntry(link_class="nvlink", protocol="simple", latency_s=2e-5, small_bw_Bps=4e11,
                            fill_latency_s=2e-5, bandwidth_Bps=4e11)
    p2p = coll.model_copy(update={"path": "p2p", "protocol": "auto", "bandwidth_Bps": 1e11, "small_bw_Bps": 1e11})
    both = build_cost_model(placement, calibration=Calibration(entries=(coll, p2p)))
    only = build_cost_model(placement, calibration=Calibration(entries=(coll,)))
    size = np.array([2.0**30])
    assert evaluate(both, "all_reduce", size).times_s == pytest.approx(evaluate(only, "all_reduce", size).times_s)
    assert evaluate(both, "sendrecv", size).times_s[0] == pytest.approx(2e-5 + 2**30 / 1e11)
