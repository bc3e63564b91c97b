"""DeepEP low-latency dispatch/combine driven from a serving scenario (a decode step of DeepSeek-V3 with 128
tokens per rank, DP attention + EP on H800 nodes; a one-token prompt keeps the seeded prefill routing small) against DeepEP's published low-latency rows
(simulator/validation/data/deepep_v1.csv), at the training-side tolerance (simulator.validation.moe.TOLERANCE).

Routing as DeepEP's test: top-8 over 288 experts rounded up to a multiple of EP, one sampled batch (seed 0)."""

import csv

import pytest

from simulator.entries.serve import simulate_serving
from simulator.scenario import load_scenario
from simulator.validation.moe import TOLERANCE
from simulator.validation.serving import DATA


def _published():
    with open(DATA.parent / "deepep_v1.csv") as fh:
        rows = [r for r in csv.DictReader(line for line in fh if not line.startswith("#"))]
    return {int(r["ep"]): (float(r["dispatch_us"]), float(r["combine_us"])) for r in rows if r["mode"] == "low_latency"}


def serving_scenario(ep: int) -> dict:
    experts = -(-288 // ep) * ep
    return {"system": {"profile": "hgx_h800", "nodes": ep // 8, "net_issue": "ibgda"},
            "model": {"preset": "deepseek-v3", "moe": {"experts": experts, "top_k": 8, "expert_ffn_hidden": 2048,
                                                        "shared_experts": 1}},
            "parallel": {"tp": 1, "ep": ep}, "training": {"mode": "inference", "precision": "fp8"},
            "moe": {"seed": 0},
            "serving": {"batch": 128, "input_len": 1, "output_len": 1, "all2all_backend": "deepep_low_latency"}}


@pytest.mark.parametrize("ep", [8, 16, 32, 64, 128, 256])
def test_low_latency_decode_dispatch_combine(ep):
    result = simulate_serving(load_scenario(serving_scenario(ep)))
    comm = {c["op"]: c for c in result.decode.comm if c["dim"] == "ep"}
    dispatch_us, combine_us = _published()[ep]
    assert comm["dispatch"]["time_s"] * 1e6 == pytest.approx(dispatch_us, rel=TOLERANCE)
    assert comm["combine"]["time_s"] * 1e6 == pytest.approx(combine_us, rel=TOLERANCE)
