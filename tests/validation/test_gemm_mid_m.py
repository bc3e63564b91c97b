"""The H200 bf16 GEMM model at mid m (issue 29, h64; docs/step_time.md, "GEMM at mid m").

Rows: the isolated Llama-3-8B projection GEMMs of the serving run (simulator/validation/data/h200_serve/ops.jsonl,
CUDA-graph timed; calibration data) and, disjoint from it, the hidden-5120 projections of
simulator/validation/data/h200_prefill_ops and the 113-product sweep of simulator/validation/data/h200_gemm_graphs.

The shipped ``hopper`` table (whole waves, ``wave_quantization`` 1) prices the 2048-token serving GEMMs 4-9% slow
and the 512-token ones 5-21% slow. Of the model's terms, wave quantization explains most of the m trend: a fit
of the wave weight w to the calibration rows (the kit CSV + ops.jsonl) goes to w = 0 and halves the mid-m
error, but it pushes a large sweep product (Qwen2.5-1.5B lm_head dgrad) 6.9% fast and the published development
set from -1.5% to -2.5% signed median, so it is not shipped; the tests pin both sides.
"""

import json

import numpy as np
import pytest

from simulator.compute import default_efficiency, fit_errors
from simulator.compute.fit import GemmRow
from simulator.hardware import load_gpu
from simulator.validation import VALIDATION_DATA

GEMMS = ("qkv", "o", "gate_up", "down")
#: hidden-5120 shapes of h200_prefill_ops (its README: qkv 5120 x 7168, o 5120 x 5120, gate_up 5120 x 27648,
#: down 13824 x 5120)
PREFILL_KN = {"qkv": (5120, 7168), "o": (5120, 5120), "gate_up": (5120, 27648), "down": (13824, 5120)}


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def hopper():
    return load_gpu("h200_sxm"), default_efficiency("hopper")


def _serve(m):
    rows = _jsonl(VALIDATION_DATA / "h200_serve" / "ops.jsonl")
    return {r["op"]: GemmRow("bf16", r["m"], r["k"], r["n"], r["time_s"]) for r in rows
            if r.get("op") in GEMMS and r["m"] == m}


def _err(rows, gpu, eff, w=None):
    table = eff if w is None else eff.model_copy(update={"wave_quantization": w})
    return dict(zip(rows, fit_errors(list(rows.values()), gpu, table), strict=True))


def test_whole_waves_are_the_default(hopper):
    assert hopper[1].wave_quantization == 1.0
    assert default_efficiency("ampere").wave_quantization == 1.0


@pytest.mark.parametrize(("m", "want"), [
    # measured 150.2 / 96.4 / 695.9 / 338.3 us; model 156.6 / 105.3 / 720.8 / 354.0 us
    (2048, {"qkv": 0.042, "o": 0.092, "gate_up": 0.036, "down": 0.046}),
    (512, {"qkv": 0.201, "o": 0.207, "gate_up": 0.178, "down": 0.051}),
    (16384, {"qkv": 0.006, "o": 0.008, "gate_up": -0.016, "down": 0.005}),
])
def test_serve_ops_errors_shipped(hopper, m, want):
    err = _err(_serve(m), *hopper)
    assert err == pytest.approx(want, abs=0.003)


def test_serve_ops_errors_without_wave_quantization(hopper):
    """The candidate w = 0 (fit at the bound on the calibration rows): 2048 tokens +0.5..+6.0%, 512 still +3..+21%."""
    err = _err(_serve(2048), *hopper, w=0.0)
    assert err == pytest.approx({"qkv": 0.011, "o": 0.060, "gate_up": 0.005, "down": 0.015}, abs=0.003)
    err = _err(_serve(512), *hopper, w=0.0)
    assert err == pytest.approx({"qkv": 0.135, "o": 0.206, "gate_up": 0.143, "down": 0.029}, abs=0.003)


def test_disjoint_rows_both_ways(hopper):
    gpu, eff = hopper
    ops = [r for r in _jsonl(VALIDATION_DATA / "h200_prefill_ops" / "prefill_ops.jsonl") if r.get("op") in GEMMS]
    rows = {i: GemmRow("bf16", r["m"], *PREFILL_KN[r["op"]], r["time_s"]) for i, r in enumerate(ops)}
    assert len(rows) == 12
    shipped, w0 = (np.array(list(_err(rows, gpu, eff, w).values())) for w in (None, 0.0))
    assert np.median(shipped) == pytest.approx(0.006, abs=0.003)
    assert np.abs(shipped).max() == pytest.approx(0.204, abs=0.003)   # qkv at 2048 tokens: measured 802 TFLOP/s
    assert np.abs(w0).max() == pytest.approx(0.168, abs=0.003)
    sweep = [r for r in _jsonl(VALIDATION_DATA / "h200_gemm_graphs" / "gemm_sweep.jsonl") if "M" in r]
    srows = {i: GemmRow("bf16", r["M"], r["K"], r["N"], r["ms"] / 1e3) for i, r in enumerate(sweep)}
    shipped, w0 = (np.array(list(_err(srows, gpu, eff, w).values())) for w in (None, 0.0))
    assert np.median(shipped) == pytest.approx(0.037, abs=0.003)
    assert np.median(w0) == pytest.approx(0.010, abs=0.003)
    assert np.abs(shipped).mean() == pytest.approx(0.062, abs=0.003)
    assert np.abs(w0).mean() == pytest.approx(0.039, abs=0.003)
    large = np.array([2 * r.m * r.n * r.k >= 2e11 for r in srows.values()])
    assert np.abs(shipped[large]).max() == pytest.approx(0.056, abs=0.003)
    assert np.abs(w0[large]).max() == pytest.approx(0.069, abs=0.003)   # why w = 0 is not shipped
