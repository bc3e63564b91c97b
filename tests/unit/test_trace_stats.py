"""The Kineto trace reader and its statistics on the hand-written trace of tests/unit/kineto_synthetic.py, every
expected number worked out by hand from the event times written there (microseconds)."""

import pytest

from simulator.compute import GemmRow, default_efficiency, fit_peak_fraction
from simulator.compute.fit import predict
from simulator.hardware import load_gpu
from simulator.implementation.kineto import read_trace
from simulator.implementation.trace_stats import find_period, trace_stats
from simulator.validation.trace_calibration import build_profile, gpu_for_trace
from tests.unit.kineto_synthetic import synthetic_trace, write_trace

US = 1e-6


@pytest.fixture
def stats(tmp_path):
    return trace_stats(read_trace(write_trace(tmp_path / "t.json")))


def test_device_and_steps(stats):
    assert (stats.gpu_name, stats.gpu_sms, stats.steps, stats.launch) == ("NVIDIA H200", 132, 1, "eager")


def test_phase_counts(stats):
    fwd, bwd, opt = (stats.phases[p] for p in ("forward", "backward", "optimizer"))
    assert (fwd.kernels, fwd.memcpy, fwd.launches, fwd.dtoh_copies, fwd.syncs) == (7, 1, 8, 1, {"stream": 1})
    assert (bwd.kernels, bwd.launches, bwd.syncs) == (4, 4, {})
    assert (opt.kernels, opt.launches) == (1, 1)


def test_forward_host_bound_idle(stats):
    """Forward: kernels at [5,10], [15,20], ..., [65,70] and the copy at [76,78]: busy 7 x 5 + 2 = 37 us; idle 6 gaps
    of 5 us and 70-76: 36 us, all host-bound (each next op's launch call ended after the GPU went idle)."""
    fwd = stats.phases["forward"]
    assert fwd.gpu_busy_s == pytest.approx(37 * US)
    assert fwd.gpu_idle_s == pytest.approx(36 * US)
    assert fwd.host_bound_idle_s == pytest.approx(36 * US)
    assert fwd.kernel_s == pytest.approx(35 * US)


def test_issue_spacing(stats):
    """Forward launch calls start at 0, 10, ..., 60 and the copy's at 72 (the sync starts at 75, after it): 7 spacings
    summing to 72 us. Backward: 100, 110, 120, 130: 3 spacings of 10 us. Optimizer: one launch, no spacing."""
    fwd, bwd, opt = (stats.phases[p] for p in ("forward", "backward", "optimizer"))
    assert (fwd.issue_s, fwd.issue_gaps) == (pytest.approx(72 * US), 7)
    assert fwd.issue_per_launch_s == pytest.approx(72 / 7 * US)
    assert (bwd.issue_s, bwd.issue_gaps) == (pytest.approx(30 * US), 3)
    assert opt.issue_gaps == 0 and opt.issue_per_launch_s is None


def test_backward_gpu_bound(stats):
    """Backward kernels of 20 us back to back from 105 to 185: no idle time."""
    bwd = stats.phases["backward"]
    assert bwd.gpu_busy_s == pytest.approx(80 * US)
    assert bwd.gpu_idle_s == pytest.approx(0.0, abs=1e-12)


def test_sync_host_time_and_step_span(stats):
    """The sync runs 75-90; the last device op before it ends at 78: 12 us of its own. Step: busy 37 + 80 + 25 =
    142 us over the span 5-240 = 235 us."""
    assert stats.sync_host_s == pytest.approx(12 * US)
    assert stats.step_gpu_busy_s == pytest.approx(142 * US)
    assert stats.step_gpu_span_s == pytest.approx(235 * US)


def test_layers_found_by_period(stats):
    fwd, bwd = stats.periods["forward"], stats.periods["backward"]
    assert (fwd.kernels_per_layer, fwd.layers, fwd.outside) == (3, 2, 1)
    assert (bwd.kernels_per_layer, bwd.layers, bwd.outside) == (2, 2, 0)


@pytest.mark.parametrize("sequence, expected", [
    (("emb",) + ("a", "b", "c", "d") * 5 + ("norm", "head"), (4, 5, 1, 3)),
    (("a", "a", "b") * 4, (3, 4, 0, 0)),                      # a sub-repeat (a, a) inside the layer loses to the layer
    (("x", "y", "z", "w"), None),                             # nothing repeats
    (("a",) * 8, None),                                       # one kernel name repeated is no layer block
])
def test_find_period(sequence, expected):
    found = find_period(sequence)
    assert (found and (found.kernels_per_layer, found.layers, found.first, found.outside)) == expected


def test_gemm_shapes_and_optimizer(stats):
    g = sorted(stats.gemms, key=lambda g: g.phase)
    assert [(x.phase, x.dtype, x.m, x.k, x.n) for x in g] == [("backward", "bf16", 64, 256, 128),
                                                            ("forward", "bf16", 64, 128, 256)]
    assert g[0].time_s == pytest.approx(20 * US) and g[1].flops == 2 * 64 * 128 * 256
    assert stats.optimizer_impl == "fused"


def test_profile_fields(stats):
    p = build_profile(stats, "mine")
    assert p["kernels"] == {"dense_forward": 3, "dense_backward": 2, "per_step": 1}
    # 10 spacings of 102 us in all, times 13 launches per 12 kernels (the copy is a launch, not a kernel)
    assert p["host"]["per_kernel_s"] == pytest.approx((72 + 30) / 10 * 13 / 12 * US, rel=1e-3)
    assert p["host"]["per_sync_s"] == pytest.approx(12 * US)
    assert p["syncs"] == {"per_step": 1} and p["optimizer"] == {"impl": "fused"} and p["launch"] == "eager"
    assert all(stats.sha256 in v for v in p["sources"].values())
    assert set(p["sources"]) >= {"host.per_kernel_s", "kernels.dense_forward", "kernels.per_step", "syncs.per_step"}


def test_gpu_profile_from_the_trace(stats, tmp_path):
    trace = read_trace(write_trace(tmp_path / "t.json"))
    assert gpu_for_trace(trace.device, trace.file).name == "h200_sxm"


def test_peak_fraction_fit_matches_the_total():
    """The fitted fraction makes the model's total equal the measured total (the shape terms unchanged)."""
    gpu = load_gpu("h200_sxm")
    start = default_efficiency("hopper")
    rows = [GemmRow("bf16", 4096, 4096, 4096, 0.25e-3), GemmRow("bf16", 8192, 4096, 1024, 0.10e-3)]
    fitted, clamped = fit_peak_fraction(rows, gpu, start, "bf16")
    assert not clamped
    assert predict(rows, gpu, fitted).sum() == pytest.approx(0.35e-3, rel=1e-9)
    assert fitted.tiles == start.tiles and fitted.k_overhead == start.k_overhead


def test_profiler_overhead_taken_off(stats):
    """Host events recorded inside the kept spacings (operators and API calls of the launching thread): forward 7
    (each spacing holds its launch call), backward 3 + 2 + 2 (launch, aten::mm and the next evaluate_function op;
    then launch and evaluate_function). At 1 us each: (102 - 14) us / 10 spacings = 8.8 us per launch, x 13 / 12
    per kernel."""
    assert (stats.phases["forward"].issue_events, stats.phases["backward"].issue_events) == (7, 7)
    assert build_profile(stats, "x", profiler_event_s=1 * US)["host"]["per_kernel_s"] == pytest.approx(8.8 * 13 / 12 * US, rel=1e-3)


def test_a_launch_that_waited_for_the_queue_is_not_issue_time(tmp_path):
    """A launch call of 100 us (over 5 x the 4 us median: it waited for a slot in a full launch queue) leaves its
    spacing out: forward keeps 6 of its 7 spacings, 72 - 10 = 62 us."""
    doc = synthetic_trace()
    call = next(e for e in doc["traceEvents"] if e["cat"] == "cuda_runtime" and e["ts"] == 10)
    call["dur"] = 100
    fwd = trace_stats(read_trace(write_trace(tmp_path / "q.json", doc))).phases["forward"]
    assert (fwd.issue_gaps, fwd.issue_s) == (6, pytest.approx(62 * US))
