"""The shipped ``hopper`` GEMM table (fitted to the 132-GEMM kit run, simulator/validation/data/h200x2_kit) against
an independent sweep: 113 bf16 products timed under CUDA graphs with warmed clocks on one H200
(simulator/validation/data/h200_gemm_graphs/gemm_sweep.jsonl: squares and the forward / input-gradient /
weight-gradient shapes of Llama-3.2-1B and Qwen2.5-1.5B at 4K-16K tokens). Nothing was fitted to the sweep.

What it shows (docs/step_time.md, "GEMM rate: which measurement"):
- products of at least 0.2 TFLOP (2 M N K; 44 of them: the MLP, head and large attention products at 8K-16K tokens
  and the large squares) are predicted within 6% each, 1-3% slow on average: the sweep's short graph replays run at
  boost clocks, the kit's back-to-back runs nearer the power-capped sustained clock (a 25 s bf16 8192^3 loop ran at
  656 TFLOP/s, SM 1440 MHz at the 700 W limit: simulator/validation/data/h200_power);
- products with a 1536-2048 dimension at 4096 tokens are predicted 10-30% slow, most of it the additive
  ``launch_s`` (2.68 us per kernel, fitted to the kit's eager back-to-back runs): without it the products under
  0.1 TFLOP are 1.1% slow at the median (+8.3% with it). The serving decode rows need that per-kernel cost for their
  tiny kernels (with 0.5 us they come out 20-26% fast), so a kernel is better priced as a floor plus a small gap,
  max(floor, work) + gap, than as launch + work: the open item of the shape model, pinned here so that a change
  to it shows.
"""

import json

import numpy as np

from simulator.compute import default_efficiency, fit_errors
from simulator.compute.fit import GemmRow
from simulator.hardware import load_gpu
from simulator.validation import VALIDATION_DATA

SWEEP = VALIDATION_DATA / "h200_gemm_graphs" / "gemm_sweep.jsonl"


def _rows() -> list[GemmRow]:
    rows = [json.loads(line) for line in SWEEP.read_text().splitlines() if line.strip()]
    return [GemmRow(dtype="bf16", m=r["M"], k=r["K"], n=r["N"], time_s=r["ms"] / 1e3) for r in rows if "M" in r]


def _errors(rows):
    return fit_errors(rows, load_gpu("h200_sxm"), default_efficiency("hopper"))


def test_sweep_is_the_recorded_one():
    rows = _rows()
    assert len(rows) == 113
    square = next(r for r in rows if r.m == r.k == r.n == 8192)
    assert 700 < 2 * 8192**3 / square.time_s / 1e12 < 735     # 717 TFLOP/s in the README


def test_large_products_within_six_percent():
    rows = _rows()
    err = _errors(rows)
    large = np.array([e for e, r in zip(err, rows, strict=True) if 2 * r.m * r.n * r.k >= 2e11])
    assert large.size == 44
    assert np.abs(large).max() <= 0.06, np.abs(large).max()
    assert 0.005 <= np.median(large) <= 0.03, np.median(large)   # slow by 1-3%: burst vs sustained clocks


def test_mid_size_products_at_4k_tokens_are_predicted_slow():
    rows = _rows()
    err = _errors(rows)
    mid = np.array([e for e, r in zip(err, rows, strict=True)
                    if 4096 in (r.m, r.n, r.k) and max(r.m, r.n, r.k) == 4096 and 1536 <= min(r.m, r.n, r.k) <= 2048
                    and sorted((r.m, r.n, r.k))[1] <= 2048])
    assert mid.size >= 10
    assert np.median(mid) >= 0.09, np.median(mid)    # the known pessimism (module docstring)
    assert np.abs(err).mean() <= 0.065               # whole sweep: 6.2% mean |error|
