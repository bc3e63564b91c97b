"""MoE grouped GEMMs measured on one H200 (simulator/validation/data/h200_moe/moe_gemm.jsonl) against the compute
model: the dense GEMM model of the same shape over the grouped-kernel fraction (compute_efficiency.yaml)."""

import json

import numpy as np
import pytest

from simulator.compute import default_efficiency
from simulator.hardware import load_gpu
from simulator.pricing.compute import expert_ffn_time
from simulator.validation import VALIDATION_DATA


def _measured(variant: str) -> list[dict]:
    lines = (VALIDATION_DATA / "h200_moe" / "moe_gemm.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, filter(None, lines)) if r.get("kind") == "moe_gemm" and r["variant"] == variant]


@pytest.mark.parametrize(("variant", "dtype", "mean_bound"), [("grouped_bf16", "bf16", 0.055),
                                                              ("grouped_fp8", "fp8", 0.08)])
def test_grouped_expert_gemms_reproduce_the_measurements(variant, dtype, mean_bound):
    """104 configurations each (8-32 local experts, 64-16384 tokens per expert): mean |error| 5.1% / 7.7%."""
    from simulator.pricing.compute import gemm_op_seconds
    from simulator.program import Gemm

    gpu, eff = load_gpu("h200_sxm"), default_efficiency("hopper")
    rows = _measured(variant)
    assert len(rows) == 104
    ops = [Gemm("experts.fc1", "fwd", r["tokens_per_expert"], r["k"], r["n"], r["experts"], dtype=dtype,
                kernel="grouped_expert") for r in rows]
    errors = gemm_op_seconds(ops, gpu, eff) / np.array([r["time_s"] for r in rows]) - 1
    assert np.mean(np.abs(errors)) <= mean_bound and abs(np.median(errors)) <= 0.02


def test_expert_ffn_is_slower_than_the_same_dense_gemms():
    from simulator.model import load_model_preset

    gpu, eff = load_gpu("h200_sxm"), default_efficiency("hopper")
    m = load_model_preset("mixtral-8x7b")
    fwd = expert_ffn_time(m, gpu, eff, "bf16", [4096] * 2)[0]
    dense = eff.model_copy(update={"grouped_efficiency": {}})
    assert fwd == pytest.approx(eff.launch_s * 2 + (expert_ffn_time(m, gpu, dense, "bf16", [4096] * 2)[0]
                                                    - eff.launch_s * 2) / 0.912, rel=1e-9)
