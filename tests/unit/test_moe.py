"""MoE routing, payloads, message-size regimes, capacity by hand, skew monotonicity, overlap, the layer hook."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import placement_for_profile
from simulator.errors import UserError
from simulator.model import load_model_preset
from simulator.moe import (
    CommSettings,
    ep_comm,
    layer_time,
    message_regime,
    moe_layer_comm,
    rdma_send_time,
    route,
    sm_slowdown,
    token_bytes,
)
from simulator.units import KiB

NIC = 50e9  # one ConnectX-7 400 Gb/s


def test_token_bytes_fp8_with_scales_and_bf16():
    assert token_bytes(7168, "fp8") == 7168 + 56 * 4 == 7392
    assert token_bytes(7168, "bf16") == 14336
    with pytest.raises(UserError, match="fp8, bf16"):
        token_bytes(7168, "fp16")


def test_one_token_per_message_is_rate_bound_under_proxy_and_near_line_rate_under_ibgda():
    """NVSHMEM issue #8 (2x H800, one NIC): the proxy saturates at ~32 KiB messages, IBGDA at ~8 KiB."""
    token = token_bytes(7168, "fp8")
    proxy_bw, proxy_rate_bound = message_regime(token, NIC, "cpu_proxy")
    gda_bw, gda_rate_bound = message_regime(token, NIC, "ibgda")
    assert proxy_rate_bound and proxy_bw < 0.3 * NIC
    assert gda_bw > 0.85 * NIC
    for size in (32 * KiB, 64 * KiB, 128 * KiB):
        for issue in ("cpu_proxy", "ibgda"):
            bw, rate_bound = message_regime(size, NIC, issue)
            assert not rate_bound and bw == pytest.approx(NIC * 0.94)


def test_send_time_by_message_size_many_queue_pairs():
    """The same 64 MiB as 7.4 KiB tokens or 32 KiB chunks, to 64 peers on 24 QPs each."""
    total = 64 * 2**20
    token = token_bytes(7168, "fp8")
    t = {(issue, size): float(rdma_send_time(total, total / size, 64, 24, NIC, issue))
         for issue in ("cpu_proxy", "ibgda") for size in (token, 32 * KiB)}
    line = total / (NIC * 0.94)
    assert t["cpu_proxy", token] > 3 * line  # message-rate bound
    assert t["ibgda", token] < 1.15 * line
    assert t["cpu_proxy", 32 * KiB] < 1.1 * line and t["ibgda", 32 * KiB] < 1.15 * line


def test_capacity_factor_drops_and_pads_exactly_as_by_hand():
    """8 tokens/rank, top-2 of 4 experts, EP 2, cf 1.0: C = ceil(1.0 * 8 * 2 / 4) = 4 slots per expert per source.
    Weights 6:4:4:2 give, in expectation, selections 8*2*[.375,.25,.25,.125] = [6, 4, 4, 2] before water-filling;
    water-filling (pi <= 1) keeps them as is (6/8 = 0.75 <= 1). Per source: kept [4, 4, 4, 2], dropped [2, 0, 0, 0],
    padding [0, 0, 0, 2]."""
    r = route(8, 2, 4, 2, distribution=[6, 4, 4, 2], capacity_factor=1.0)
    assert r.capacity == 4
    np.testing.assert_allclose(r.expert_tokens, [[4, 4, 4, 2]] * 2)
    np.testing.assert_allclose(r.dropped, [[2, 0, 0, 0]] * 2)
    np.testing.assert_allclose(r.padding, [[0, 0, 0, 2]] * 2)
    assert r.dropped_tokens == 4 and r.padded_tokens == 4
    np.testing.assert_allclose(r.expert_load, [[8, 8], [8, 8]])  # 2 sources x C per expert
    np.testing.assert_allclose(r.padded_selections, [[8, 8], [8, 8]])


def test_sampled_capacity_keeps_the_first_c_in_token_order():
    r = route(64, 2, 8, 2, capacity_factor=0.5, seed=3)
    assert r.capacity == 8  # ceil(0.5 * 64 * 2 / 8)
    assert (r.expert_tokens <= 8).all() and r.dropped_tokens > 0
    total = r.expert_tokens + r.dropped
    np.testing.assert_allclose(total.sum(), 2 * 64 * 2)
    np.testing.assert_allclose(r.padding, np.maximum(8 - r.expert_tokens, 0))


def test_fluid_and_sampled_routing_agree_on_volumes():
    for ep, limit in ((8, None), (32, 4), (64, 4)):
        f = route(4096, 8, 256, ep, node_limit=limit)
        s = route(4096, 8, 256, ep, node_limit=limit, seed=1)
        assert f.node_tokens.sum() == pytest.approx(s.node_tokens.sum(), rel=0.02)
        assert f.rank_tokens.sum() == pytest.approx(s.rank_tokens.sum(), rel=0.03)
        assert f.expert_tokens.sum() == pytest.approx(s.expert_tokens.sum())
    assert route(4096, 8, 256, 64, node_limit=2, seed=0).node_tokens.sum(1).max() <= 2 * 4096


def _step(exponent: float) -> float:
    model = load_model_preset("mixtral-8x7b")
    p = placement_for_profile("hgx_h800", 8)
    comm = moe_layer_comm(model, 2048, p, CommSettings(backend="nccl"), distribution="zipf",
                          zipf_exponent=exponent)
    flops_per_token = 6 * model.hidden * model.moe.expert_ffn_hidden
    return comm.layer_time_s(comm.max_rank_tokens * flops_per_token / 700e12, 132)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 3.0), st.floats(0.01, 1.0))
def test_skew_raises_layer_time_monotonically(s, ds):
    assert _step(s + ds) >= _step(s) - 1e-12


def test_skew_imbalance_reported():
    flat = route(2048, 2, 8, 8, distribution="zipf", zipf_exponent=0.0)
    hot = route(2048, 2, 8, 8, distribution="zipf", zipf_exponent=1.5)
    assert flat.imbalance == pytest.approx(1.0)
    assert hot.imbalance > 2.0


def test_overlap_sequential_vs_streamed():
    assert layer_time(1.0, 2.0, 1.0, "sequential") == 4.0
    assert layer_time(1.0, 2.0, 1.0, "streamed", chunks=1) == 4.0
    assert layer_time(1.0, 2.0, 1.0, "streamed", chunks=4) == pytest.approx(4 / 4 + 3 / 4 * 2.0)
    assert layer_time(1.0, 5.0, 1.0, "streamed", chunks=10**6) == pytest.approx(5.0, rel=1e-5)
    assert sm_slowdown(132, 24) == pytest.approx(132 / 108)


def test_layer_hook_forward_backward_and_sms():
    model = load_model_preset("deepseek-v3")
    p = placement_for_profile("hgx_h800", 32)
    comm = moe_layer_comm(model, 4096, p, node_limit=4)
    assert comm.reserved_sms == 24 and comm.overlap == "streamed"
    assert comm.backward_dispatch_s > comm.forward_dispatch_s  # BF16 gradients vs FP8 tokens
    assert comm.backward_combine_s == pytest.approx(comm.forward_combine_s)
    assert comm.expert_tokens.shape == (32, 8)
    assert comm.expert_tokens.sum() == pytest.approx(32 * 4096 * 8)
    nccl = moe_layer_comm(model, 4096, p, CommSettings(backend="nccl"), node_limit=4)
    assert nccl.reserved_sms == 0 and nccl.overlap == "sequential"
    assert nccl.layer_time_s(1e-3, 132) > comm.layer_time_s(1e-3, 132)


def test_backends_and_transport_rules():
    r = route(128, 8, 288, 8)
    p = placement_for_profile("hgx_h800", 8)
    ll_gda = ep_comm(r, p, 7168, CommSettings(backend="deepep_low_latency"))
    ll_rc = ep_comm(r, p, 7168, CommSettings(backend="deepep_low_latency", transport="ibrc"))
    uccl = ep_comm(r, p, 7168, CommSettings(backend="cpu_proxy"))
    assert ll_rc.dispatch.time_s > 3 * ll_gda.dispatch.time_s and ll_rc.dispatch.limiting == "message_rate"
    assert uccl.dispatch.time_s < 1.2 * ll_gda.dispatch.time_s  # 4 proxy threads ~ IBGDA (UCCL-EP claim)
    nvl = ep_comm(r, p, 7168, CommSettings(backend="deepep_low_latency", ll_nvlink=True))
    assert nvl.dispatch.time_s < ll_gda.dispatch.time_s
    with pytest.raises(UserError, match="ibgda"):
        ep_comm(r, p, 7168, CommSettings(backend="nccl", transport="ibgda"))


def test_routing_errors_are_user_errors():
    with pytest.raises(UserError, match="split evenly"):
        route(128, 8, 288, 256)
    with pytest.raises(UserError, match="top_k"):
        route(128, 9, 8, 8)
    with pytest.raises(UserError, match="histogram"):
        route(128, 2, 8, 8, distribution=[1, 2])


def _cli(argv):
    from simulator.cli import moe_cmd

    parser = argparse.ArgumentParser()
    moe_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["moe", *argv])
    return args.handler(args)


def test_cli_json_keys_and_table(capsys):
    base = ["--system", "hgx_h800", "--nodes", "4", "--ep", "32", "--tokens", "4096", "--hidden", "7168",
            "--top-k", "8", "--topk-groups", "4"]
    assert _cli([*base, "--json"]) == 0
    proxy = json.loads(capsys.readouterr().out)
    assert set(proxy) == {"dispatch_us", "combine_us", "dispatch_GBps", "combine_GBps", "bottleneck"}
    assert proxy["bottleneck"] == "rdma"
    assert _cli([*base, "--transport", "ibgda", "--qps", "24", "--json"]) == 0
    gda = json.loads(capsys.readouterr().out)
    assert gda["dispatch_GBps"] > 1.15 * proxy["dispatch_GBps"]
    assert _cli(base) == 0
    assert "dispatch" in capsys.readouterr().out


def test_cli_user_mistakes_raise_user_error():
    with pytest.raises(UserError, match="evenly"):
        _cli(["--system", "hgx_h800", "--nodes", "3", "--ep", "16", "--tokens", "8", "--hidden", "64", "--top-k", "2"])
    with pytest.raises(UserError, match="unknown"):
        _cli(["--system", "nope", "--nodes", "1", "--ep", "8", "--tokens", "8", "--hidden", "64", "--top-k", "2"])
