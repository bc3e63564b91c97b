"""Disaggregated K/V hand-off bytes and links by hand, and the request-rate curve on a real scenario."""

import pytest

from simulator.entries.serve import simulate_serving
from simulator.errors import UserError
from simulator.scenario import load_scenario


def _disagg(profile: str, nodes: int, model: str, parallel: dict, precision: str, prefill_replicas: int) -> dict:
    return {"system": {"profile": profile, "nodes": nodes}, "model": {"preset": model}, "parallel": parallel,
            "training": {"mode": "inference", "precision": precision},
            "serving": {"batch": 8, "input_len": 4096, "output_len": 16,
                        "disaggregation": {"prefill_replicas": prefill_replicas}}}


def test_kv_handoff_across_nodes_goes_over_rdma():
    """Llama-3-70B TP 8 on two DGX H100: replica 0 (node 0) prefills, replica 1 (node 1) decodes. Each GPU sends
    layers x 2 (K, V) x kv_heads x head_dim x tokens x 2 B / TP = 80 x 2 x 8 x 128 x 4096 x 2 / 8 = 167,772,160 B
    over its own 400 Gb/s NIC (50 GB/s): at least 3.36 ms, and not more than 25% above it (protocol efficiency
    and latency of NCCL's p2p Simple channel)."""
    sc = load_scenario(_disagg("dgx_h100", 2, "llama3-70b", {"tp": 8}, "bf16", 1))
    k = simulate_serving(sc).disaggregation["kv_transfer"]
    assert k["bytes_per_gpu"] == 80 * 2 * 8 * 128 * 4096 * 2 / 8 == 167_772_160
    assert k["link"] == "network"
    nic = sc.cluster.node.nics.bandwidth
    assert nic == pytest.approx(50e9)
    assert k["bytes_per_gpu"] / nic <= k["time_s"] <= 1.25 * k["bytes_per_gpu"] / nic


def test_kv_handoff_inside_an_nvlink_domain_stays_on_nvlink():
    """GB200 NVL72: trays 0 and 1 are separate nodes of one NVLink domain, so replica 0 -> replica 1 (TP 4, one
    tray each) is an NVLink transfer: 80 x 2 x 8 x 128 x 4096 x 2 / 4 = 335,544,320 B, faster than any NIC
    (below 335.5 MB / 100 GB/s)."""
    k = simulate_serving(load_scenario(_disagg("gb200_nvl72", 18, "llama3-70b", {"tp": 4}, "bf16", 1))
                         ).disaggregation["kv_transfer"]
    assert k["bytes_per_gpu"] == 80 * 2 * 8 * 128 * 4096 * 2 / 4 == 335_544_320
    assert k["link"] == "nvlink"
    assert k["time_s"] < k["bytes_per_gpu"] / 100e9


def test_mla_handoff_is_the_latent_cache():
    """DeepSeek-V3 (MLA) with DP attention, EP 16 on two DGX H100, 8 prefill replicas (node 0), 8 decode (node 1):
    one GPU's cache is 61 layers x 4096 tokens x (512 latent + 64 rope) x 2 B (the cache element defaults to the
    activation dtype, bf16, also under the fp8 recipe: docs/interface.md kv_cache_dtype); no K/V heads, no TP split;
    across nodes: RDMA."""
    k = simulate_serving(load_scenario(_disagg("dgx_h100", 2, "deepseek-v3", {"tp": 1, "ep": 16}, "fp8", 8))
                         ).disaggregation["kv_transfer"]
    assert k["bytes_per_gpu"] == 61 * 4096 * (512 + 64) * 2
    assert k["link"] == "network"


def _rate(rates: list[float], batch: int = 1, **serving) -> dict:
    return {"system": {"profile": "hgx_h200", "gpus": 1}, "model": {"preset": "llama3-8b"},
            "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": batch, "input_len": 1024, "output_len": 64, "request_rate": rates,
                        "num_requests": 200, **serving}}


def test_low_rate_ttft_is_the_prefill_of_one_prompt():
    """At 0.001 requests/s (one every ~1000 s, each done in ~0.5 s) every request finds the engine empty: TTFT is
    the prefill of one prompt (the static result with batch 1), TPOT the mean decode step of one sequence."""
    r = simulate_serving(load_scenario(_rate([0.001])))
    p = r.rate_curve[0]
    assert p["stable"] and p["preemptions"] == 0 and p["batch_max"] == 1
    for q in (50, 90, 99):
        assert p[f"ttft_p{q}_s"] == pytest.approx(r.prefill.step_s, rel=1e-9)
        assert p[f"tpot_p{q}_s"] == pytest.approx(r.tpot_s, rel=1e-3)
    assert p["e2e_p50_s"] == pytest.approx(r.e2e_s, rel=1e-3)


def test_rate_above_saturation_is_unstable_and_latency_grows_with_rate():
    r = simulate_serving(load_scenario(_rate([0.001])))
    sat = r.saturation_request_rate
    r = simulate_serving(load_scenario(_rate([0.2 * sat, 0.8 * sat, 2 * sat])))
    low, high, over = r.rate_curve
    assert low["stable"] and high["stable"] and not over["stable"]
    assert over["ttft_p50_s"] is None and over["tpot_p99_s"] is None
    assert over["tokens_per_s"] == pytest.approx(sat * 64)
    assert low["ttft_p99_s"] < high["ttft_p99_s"] and low["tpot_p50_s"] < high["tpot_p50_s"]
    assert any("unstable" in w for w in r.warnings)
    assert r.summary()["serve.rate." + f"{2 * sat:g}" + ".stable"] == 0.0


def test_rate_with_disaggregation_is_refused():
    with pytest.raises(UserError, match="request_rate"):
        load_scenario({**_rate([1.0]), "system": {"profile": "dgx_h100", "nodes": 1}, "parallel": {"tp": 4},
                       "serving": {**_rate([1.0])["serving"], "disaggregation": {"prefill_replicas": 1}}})


def test_a_cache_smaller_than_one_sequence_serves_no_rate():
    """Llama-3-8B bf16 on one 24 GB RTX 3090: 16 GB of weights leave room for tens of thousands of cached tokens
    (128 KiB each), not for one sequence of 200,000: a located user error, not a curve."""
    sc = {"system": {"profile": "rtx3090_x2_nvlink", "gpus": 1}, "model": {"preset": "llama3-8b"},
          "training": {"mode": "inference", "precision": "bf16"},
          "serving": {"batch": 1, "input_len": 199_000, "output_len": 1000, "request_rate": [0.1],
                      "max_batched_tokens": 8192}}
    with pytest.raises(UserError, match="less than one sequence of 200000") as e:
        simulate_serving(load_scenario(sc))
    assert e.value.key_path == "serving.request_rate"


def test_cli_names_file_and_line_of_a_serving_rule(tmp_path, capsys):
    from simulator.cli import main

    path = tmp_path / "small.yaml"
    path.write_text("system: {profile: rtx3090_x2_nvlink, gpus: 1}\nmodel: {preset: llama3-8b}\n"
                    "training: {mode: inference, precision: bf16}\nserving:\n  batch: 1\n  input_len: 199000\n"
                    "  output_len: 1000\n  max_batched_tokens: 8192\n  request_rate: [0.1]\n")
    assert main(["serve", str(path)]) == 2
    assert f"{path}:9: serving.request_rate: the K/V cache holds" in capsys.readouterr().err
