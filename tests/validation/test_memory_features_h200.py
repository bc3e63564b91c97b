"""The memory features of issue 28 item 3 against peaks measured on one H200 (simulator/validation/data/
h200_memory_features/, benchmarks/device/memory_features.py: plain-PyTorch realisations of what each framework does;
torch 2.11, 2026-12-04). Nothing was fitted: the accounting predates the runs, except torchtitan's loss
(``loss_implementation: hf_fp32`` in its profile, from torchtitan's ``del pred``; +3.1% before).

What each feature changes, by hand (N parameters, T = 4 x 2048 tokens, h = 2048, a = 16 heads):
- ``exp_avg_dtype`` / ``exp_avg_sq_dtype: bf16``: 2 x (4 - 2) B x N; N = 1,874,993,152: 7,499,972,608 B, measured
  7,499,972,608 (Megatron layout) and 2,952,202,752 against 2,957,393,920 (AMP, N = 739,348,480); the AMP
  state-heavy pair measures 7,172,852,736: its peak falls in the update, whose fp32 slices (``CHUNK``) a fused
  kernel would not allocate;
- ``store_param_remainders``: (4 - 2) B x N = 3,749,986,304 B, measured 3,750,772,736;
- ``cpu_offloading_num_layers: n``: n layers' activations, 32 T h + 4 T a B each (the eager GeLU block in bf16:
  norm inputs 2 + 2, qkv and fc1 inputs 2 + 2, q, k, v 6, SDPA output 2, GeLU and fc2 inputs 8 + 8; fp32
  logsumexp) = 537,395,200 B; n = 4: 2,149,580,800, measured 2,150,105,088 (+ the LayerNorm statistics, 16 T B per
  layer, which the Megatron accounting leaves out); n = 8: 4,299,161,600, measured 4,300,210,176;
- ``activation_func_fp8_input_store``: 12 layers x T x 2 f x (2 - 1) B, f = 5632: 1,107,296,256 B, measured the same;
- ``deallocate_pipeline_outputs``: stage 0 holds 2 outputs of 2 B x T x h in flight (1F1B, pp 2): 67,108,864 B,
  measured 67,107,840 (the two one-element placeholders the deallocation leaves).
"""

import pytest

from simulator.validation import memory_features as mf

ROWS = mf.feature_rows()
N_PARAM, T, H, A = 1_874_993_152, 4 * 2048, 2048, 16


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.case} {r.feature}")
def test_every_feature_pins_its_measured_peak(row):
    assert abs(row.error) <= mf.TOLERANCE


def _measured(case: str, **config) -> int:
    (run,) = [r for r in mf.measured_runs() if r["config"]["case"] == case and r["config"]["steps"] < mf.TIMED_STEPS
              and all(r["config"][k] == v for k, v in config.items())]
    return run["peak_allocated_bytes"]


def test_the_changes_by_hand():
    state = dict(layers=8, hidden=4096)
    assert _measured("mcore", moments="fp32", **state) - _measured("mcore", moments="bf16", remainders=False,
                                                                    **state) == 2 * 2 * N_PARAM
    assert _measured("mcore", moments="bf16", remainders=False, **state) - _measured(
        "mcore", remainders=True, **state) == pytest.approx(2 * N_PARAM, rel=1e-3)
    act = dict(layers=12, activation="gelu", pp=1, moments="fp32")
    layer = 32 * T * H + 4 * T * A
    for n in (4, 8):
        assert _measured("mcore", offload=0, **act) - _measured("mcore", offload=n, **act) == pytest.approx(
            n * layer, rel=1e-3)
    swiglu = dict(activation="swiglu")
    assert _measured("mcore", fp8_store=False, **swiglu) - _measured("mcore", fp8_store=True, **swiglu) == \
        12 * T * 2 * 5632
    pipe = dict(pp=2)
    assert _measured("mcore", dealloc=False, **pipe) - _measured("mcore", dealloc=True, **pipe) == \
        pytest.approx(2 * 2 * T * H, abs=2048)


def test_the_pipeline_pair_agrees_with_the_model_on_stage_0():
    (row,) = [r for r in ROWS if "deallocate" in r.feature]
    assert row.note.startswith("kept - freed: measured 64.0 MiB, model (stage 0) 64.0 MiB")


def test_torchtitans_loop_step_time():
    (row,) = [r for r in ROWS if r.case.startswith("fsdp2")]
    assert abs(row.predicted_s / row.measured_s - 1) <= 0.05


def test_interleaved_in_flight_change_matches_megatrons_count():
    """pp 2, 4 micro-batches of 2 x 2048 tokens, 8 GeLU layers. Rank 0 warms up 2 (pp - 1) + (vpp - 1) pp chunk
    forwards and keeps one more: vpp 2 -> 5 chunks of 2 layers in flight (10 layer activations), vpp 4 -> 9 chunks
    of 1 layer (9): one layer's activations less, 32 T h + 4 T a = 268,697,600 B (T = 4096); rank 1: 3 chunks of 2
    layers (6) against 7 of 1 (7), one more. Measured (interleaved_peak.jsonl) against that count."""
    peaks = {}
    for line in mf.INTERLEAVED.read_text().splitlines():
        run = __import__("json").loads(line)
        peaks[run["rank"], run["config"]["vpp"]] = run["peak_allocated_bytes"]
    layer = 32 * 4096 * H + 4 * 4096 * A
    assert layer == 268_697_600
    assert peaks[0, 2] - peaks[0, 4] == pytest.approx(layer, rel=0.01)
    assert peaks[1, 4] - peaks[1, 2] == pytest.approx(layer, rel=0.01)
