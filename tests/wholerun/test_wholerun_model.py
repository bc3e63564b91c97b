"""The whole-run model's pure functions against hand calculations (docs/whole_run.md)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from simulator.errors import UserError
from simulator.hardware import load_gpu
from simulator.wholerun.checkpoint import daly_interval, write_seconds, young_interval
from simulator.wholerun.energy import gpu_power, run_energy, step_energy_J, step_phases
from simulator.wholerun.expectation import expected_time, lost_work_s
from simulator.wholerun.montecarlo import sample


def test_young_and_daly_by_hand():
    # stall 300 s, MTBF 4 h = 14,400 s
    # Young: sqrt(2 x 300 x 14400) = sqrt(8,640,000) = 2939.388 s
    assert young_interval(300.0, 14400.0) == pytest.approx(2939.388, abs=1e-3)
    # Daly: x = 300 / 28800 = 0.0104167, sqrt(x) = 0.1020621
    # 2939.388 x (1 + 0.1020621 / 3 + 0.0104167 / 9) - 300 = 2939.388 x 1.0351781 - 300 = 2742.79 s
    assert daly_interval(300.0, 14400.0) == pytest.approx(2742.79, abs=0.01)
    # a stall of at least 2 M: checkpoint once per MTBF
    assert daly_interval(30000.0, 14400.0) == 14400.0


def test_lost_work_and_the_expected_run_by_hand():
    # a checkpoint every hour of work, 60 s stall: a failure loses (3600 + 60) / 2 = 1830 s
    assert lost_work_s(3600.0, 60.0) == 1830.0
    # an async save durable 240 s after training resumes loses 240 s more
    assert lost_work_s(3600.0, 60.0, lag_s=240.0) == 2070.0
    # 100 h of steps, MTBF 10 h, restart 600 s:
    # checkpoints 100 x 60 = 6000 s; lambda (R + L) = (600 + 1830) / 36000 = 0.0675
    # W = 366000 / 0.9325 = 392,493.3 s; interruptions W / 36000 = 10.9026
    t = expected_time(360000.0, 3600.0, 60.0, 1 / 36000, 600.0)
    assert t.checkpoint_s == pytest.approx(6000.0)
    assert t.wall_s == pytest.approx(392493.3, abs=0.1)
    assert t.interruptions == pytest.approx(10.9026, abs=1e-4)
    assert t.lost_s == pytest.approx(10.9026 * 1830, rel=1e-4)
    assert t.restart_s == pytest.approx(10.9026 * 600, rel=1e-4)
    assert t.goodput == pytest.approx(360000 / 392493.3, rel=1e-6)


def test_a_job_that_never_finishes_is_a_user_error():
    with pytest.raises(UserError, match="never finishes") as info:
        expected_time(360000.0, 3600.0, 60.0, 1 / 1000, 600.0)
    assert info.value.key_path == "run.failures"


def test_write_time_is_capped_by_the_file_system():
    # 1 TB from 100 nodes at 2 GB/s each = 200 GB/s: 5 s; a 50 GB/s file system: 20 s
    assert write_seconds(1e12, 100, 2e9, None) == pytest.approx(5.0)
    assert write_seconds(1e12, 100, 2e9, 50e9) == pytest.approx(20.0)


def test_step_energy_is_the_sum_over_phases_by_hand():
    h200 = gpu_power(load_gpu("h200_sxm"))
    assert (h200.compute_W, h200.memory_bound_W, h200.host_bound_W, h200.idle_W) == (692.4, 487.6, 125.1, 124.4)
    step = SimpleNamespace(compute_s=1.0, recompute_s=0.2, optimizer_s=0.1, exposed_comm_s={"dp": 0.3},
                           host_s=0.05, bubble_s=0.35)
    assert step_phases(step) == pytest.approx({"compute": 1.2, "memory_bound": 0.4, "host_bound": 0.05,
                                               "idle": 0.35})
    # 1.2 x 692.4 + 0.4 x 487.6 + 0.05 x 125.1 + 0.35 x 124.4 = 830.88 + 195.04 + 6.255 + 43.54 = 1075.715 J
    assert step_energy_J(step, h200) == pytest.approx(1075.715)


def test_run_energy_by_hand():
    # 8 GPUs busy 1000 s at 500 W, 200 s more idle at 100 W, one spare node of 8 GPUs idle all 1200 s,
    # 1 node at 4600 W, 10 W of network per GPU, PUE 1.25
    e = run_energy(busy_s=1000.0, busy_W=500.0, idle_W=100.0, gpus=8, spare_gpus=8, wall_s=1200.0, node_W=4600.0,
                   nodes=1, network_W_per_gpu=10.0, pue=1.25)
    assert e.gpu_busy_J == 4.0e6                      # 1000 x 500 x 8
    assert e.gpu_idle_J == (200 * 8 + 1200 * 8) * 100  # 1.12e6
    assert e.node_J == 4600 * 1200                    # 5.52e6
    assert e.network_J == 10 * 16 * 1200              # 1.92e5
    assert e.total_J == pytest.approx(1.25 * (4.0e6 + 1.12e6 + 5.52e6 + 1.92e5))


def test_other_gpus_scale_the_h200_ratios_by_their_tdp():
    a100 = load_gpu("a100_sxm4_80gb")
    power = gpu_power(a100)
    assert power.compute_W == pytest.approx(692.4 * a100.tdp_w / 700)
    assert power.idle_W == pytest.approx(124.4 * a100.tdp_w / 700)


def test_monte_carlo_is_seeded_and_agrees_with_the_expectation():
    args = (360000.0, 3600.0, 60.0, 1 / 36000, 600.0, 0.0)
    a, b = sample(*args, samples=400, seed=7), sample(*args, samples=400, seed=7)
    assert a == b
    expected = expected_time(*args[:5])
    # the sample mean of ~11 interruptions per run over 400 runs: standard error ~ sqrt(11 / 400) = 0.17
    assert a.interruptions[0] == pytest.approx(expected.interruptions, abs=1.0)
    assert a.wall_s[0] == pytest.approx(expected.wall_s, rel=0.02)
    assert a.wall_s[1] <= a.wall_s[0] <= a.wall_s[2]
    assert not math.isnan(a.wall_s[0])


def test_component_counts_of_a_two_level_clos():
    from simulator.hardware import load_cluster
    from simulator.wholerun.failures import clos_switches, component_counts

    # 64-port leaves, non-blocking: 32 down and 32 up; 1024 NICs need 32 leaves and 32 x 32 / 64 = 16 spines
    assert clos_switches(1024, 64, 1.0) == 48
    assert clos_switches(20, 64, 1.0) == 1
    # 16 DGX H100 (8 NICs each) on the profile's 64-port fabric: 128 NICs, 4 leaves, 2 spines
    counts = component_counts(load_cluster("dgx_h100", 16), 128)
    assert counts == {"gpu": 128, "host": 16, "nic": 128, "switch": 6, "software": 16}
    assert component_counts(load_cluster("dgx_h100", 1), 8)["switch"] == 0
