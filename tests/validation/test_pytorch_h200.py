"""Plain-PyTorch GPT training steps measured on 2x H200 (simulator/validation/data/h200x2_train).

Peak memory within 5% for all four runs (1 GPU and DDP on 2, hidden 1024-4096). The memory terms this measurement
brought in were derived from PyTorch's autograd, not fitted: no DDP buckets without DDP, autocast's bf16 weight
copies saved for backward, the loss's fp32 gradient buffers at the start of backward, and gradients that are freed
between steps (so activations and gradients never peak together). Since the runs showed which terms were missing,
they check consistency more than they validate independently. Step time: the eager terms were derived from
PyTorch's kernels (and checked against an H200 kernel profile, data/h200x2_train/profile_kernels.jsonl), not fitted
to these runs; the model is 0.5-20% fast (DDP overlap and host launch latency are what is left).
"""

from simulator.validation.pytorch import MEMORY_TOLERANCE, pytorch_rows


def test_peak_memory_within_5_percent():
    rows = pytorch_rows()
    print()
    print(f"{'run':36s}{'meas GiB':>9s}{'pred':>7s}{'err':>7s}{'meas ms':>9s}{'pred':>7s}{'err':>7s}")
    for r in rows:
        print(f"{r['run']:36s}{r['measured_GiB']:9.2f}{r['predicted_GiB']:7.2f}{r['memory_error']:+7.1%}"
              f"{r['measured_ms']:9.1f}{r['predicted_ms']:7.1f}{r['time_error']:+7.1%}")
    assert len(rows) == 4
    assert all(abs(r["memory_error"]) <= MEMORY_TOLERANCE for r in rows)


def test_step_time_within_the_known_gap():
    """Eager PyTorch's layout copies, fp32 residual stream and casts are modelled (simulator.program.memops.
    eager_memops): -0.5% to -20%. What is left (DDP's all-reduce overlapping less than modelled, host launch
    latency of ~1,600 small kernels at hidden 1024) can only add time, so predictions stay below measurements;
    the 25% bound guards against regressions, it is not an accuracy claim."""
    rows = pytorch_rows()
    assert all(-0.25 <= r["time_error"] < 0.05 for r in rows)
