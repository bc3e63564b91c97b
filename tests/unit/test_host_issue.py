"""Host issue time of eager MoE layers (simulator.compute.host): the table re-derived from its H200 measurement,
the per-layer floor by hand, and what the engine does with it."""

from dataclasses import FrozenInstanceError

import pytest
import yaml

from simulator.compute.host import (
    HostIssueCosts,
    case_medians,
    fit_host_costs,
    host_wait,
)
from simulator.compute.layer import LayerTime
from simulator.entries.simulate import simulate
from simulator.implementation.profiles import profile_named
from simulator.pricing.host import host_issue_costs
from simulator.scenario.load import load_scenario
from simulator.schedule.costs import layer_costs
from simulator.validation import published

#: the eager MoE host floor of the megatron profile (measured on the H200)
MEGATRON_HOST = host_issue_costs(profile_named("megatron"))


def test_table_is_the_fit_of_its_measurement():
    """The constants are the least-squares fit of the H200 log (medians of 3 rounds), to the digits written."""
    fit = fit_host_costs()
    for name in ("moe_fwd_s", "moe_bwd_s", "per_expert_fwd_s", "per_expert_bwd_s"):
        assert getattr(MEGATRON_HOST, name) == pytest.approx(getattr(fit, name), rel=5e-4)


def test_moe_layer_host_seconds_by_hand():
    """16 local experts: 2.259 ms + 16 x 57.23 us = 3.1747 ms forward; 2.876 ms + 16 x 92.12 us = 4.3499 ms
    backward. A dense layer carries no floor (module docstring)."""
    fwd, bwd = MEGATRON_HOST.layer(True, 16)
    assert fwd == pytest.approx(3.17468e-3, rel=1e-6)
    assert bwd == pytest.approx(4.34992e-3, rel=1e-6)
    assert MEGATRON_HOST.layer(False, 0) == (0.0, 0.0)


def test_max_of_gpu_and_host_matches_the_proxys_eager_time():
    """The composition the engine uses, checked on the proxy itself: max(CUDA-graph time, host forward + backward)
    against the eager wall time, per case (medians over rounds): within -8%..+38%, 9 of 12 within +-10%, as the
    module docstring says."""
    errors = [max(m["graph_s"], m["host_fwd_s"] + m["host_bwd_s"]) / m["eager_s"] - 1 for m in case_medians().values()]
    assert len(errors) == 12
    assert min(errors) == pytest.approx(-0.080, abs=0.005) and max(errors) == pytest.approx(0.380, abs=0.005)
    assert sum(abs(e) <= 0.10 for e in errors) == 9


def test_layer_cost_waits_for_the_host_only_where_it_is_slower():
    """A layer of 1 ms forward / 2 ms backward GPU work whose kernels take 3 ms / 1 ms to issue: the forward waits
    2 ms for the host, the backward none; with full recompute the backward issues the forward again
    (1 + 3 = 4 ms of host against 2 + 1 ms of GPU): 1 ms of wait."""
    lt = LayerTime(fwd_s=1e-3, bwd_s=2e-3, fwd_flops=1.0, host_fwd_s=3e-3, host_bwd_s=1e-3)
    fwd, bwd = layer_costs(lt, (), "dense", "none", 1, timer=None, stage=0)
    assert fwd.host == pytest.approx(2e-3) and fwd.total == pytest.approx(3e-3)
    assert bwd.host == 0.0 and bwd.total == pytest.approx(2e-3)
    _, bwd_full = layer_costs(lt, (), "dense", "full", 1, timer=None, stage=0)
    assert bwd_full.recompute == pytest.approx(1e-3) and bwd_full.host == pytest.approx(1e-3)
    assert host_wait(1.0, 2.0) == 0.0


def test_qwen3_tp4_layout_is_host_bound_and_cuda_graphs_remove_it(tmp_path):
    """The zoo's Qwen3-235B TP4 EP8 row (16 local experts, 4.35 ms of GPU work per layer and micro-batch): eager,
    the step carries a host wait in its breakdown; with host_launch cuda_graphs the wait is 0 and the step is the
    GPU's alone. The breakdown still adds up to the step."""
    source = published.RUNS / "zoo_qwen3_235b_tp4_norecompute.yaml"
    eager = simulate(load_scenario(source)).to_dict()["time"]
    data = yaml.safe_load(source.read_text())
    data["training"]["host_launch"] = "cuda_graphs"
    graphed = tmp_path / "graphs.yaml"
    graphed.write_text(yaml.safe_dump(data))
    graphs = simulate(load_scenario(graphed)).to_dict()["time"]
    assert eager["breakdown_s"]["host"] > 0.2 * eager["step_s"]
    assert graphs["breakdown_s"]["host"] == 0.0
    assert eager["step_s"] > 1.5 * graphs["step_s"]
    b = eager["breakdown_s"]
    parts = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + b["host"] + sum(b["exposed_comm"].values())
    assert parts == pytest.approx(eager["step_s"], rel=1e-9)


def test_host_costs_is_a_frozen_table_row():
    row = HostIssueCosts(1e-3, 2e-3, 1e-5, 2e-5, "hand")
    assert row.layer(True, 2) == pytest.approx((1.02e-3, 2.04e-3))
    with pytest.raises(FrozenInstanceError):
        row.moe_fwd_s = 1.0
