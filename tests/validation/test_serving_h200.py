"""The serving model against the H200 decode/prefill sweep (simulator/validation/data/h200_serve): the model's
coefficients come from the per-op rows and earlier GEMM measurements; these end-to-end rows only validate."""

import pytest

from simulator.validation.serving import HOST_CALIBRATION_ROW, h200_rows, median_abs_error


@pytest.fixture(scope="module", params=["serve.jsonl", "serve_run2.jsonl"])
def rows(request):
    return h200_rows(request.param)


def test_decode_with_cuda_graphs_within_10_percent_median(rows):
    decode = [r for r in rows if r.kind == "decode" and r.graphs]
    assert len(decode) == 44
    assert median_abs_error(decode) < 0.10
    assert max(abs(r.error) for r in decode) < 0.10  # every point: at most 5.6% today


def test_prefill_within_5_percent_median_and_15_percent_max(rows):
    """Issue 29's target over 1K-32K tokens: median 2.2% / 4.2%, max 5.5% / 7.7% (runs 1 / 2) since the memory-bound
    kernels carry their measured bytes (TORCH_EAGER_CHAINS; before: 5.7% / 3.6%, max 7.4% / 7.5%, every row low).
    The 1 x 512 row is host-bound (eager issue, 20.4 ms in run 1 and 15.8 ms in run 2): -17.8% / +6.2%; with it
    the median is 2.5% / 4.9%."""
    prefill = [r for r in rows if r.kind == "prefill"]
    assert len(prefill) == 9
    assert median_abs_error(prefill) < 0.05
    in_range = [r for r in prefill if r.batch * r.tokens >= 1024]
    assert len(in_range) == 8
    assert median_abs_error(in_range) < 0.05
    assert max(abs(r.error) for r in in_range) < 0.08


def test_decode_time_grows_with_context_and_batch(rows):
    by = {(r.batch, r.tokens): r.predicted_s for r in rows if r.kind == "decode" and r.graphs}
    for (b, c), t in by.items():
        if (b, 2 * c) in by:
            assert by[(b, 2 * c)] > t
        if (2 * b, c) in by:
            assert by[(2 * b, c)] >= t


def test_eager_rows_other_than_the_calibration_row():
    """Without CUDA graphs the step is host-bound; the host launch time was derived from one row. The others are
    noisy (up to 38% between runs, README): the second run's are within 11%."""
    rows = [r for r in h200_rows("serve_run2.jsonl") if r.kind == "decode" and not r.graphs
            and (r.batch, r.tokens) != HOST_CALIBRATION_ROW]
    assert len(rows) == 4
    assert max(abs(r.error) for r in rows) < 0.12


def test_tp2_decode_on_two_h200s_with_cuda_graphs():
    """Issue 14's last item: TP2 decode of the same model on two H200s (NVLink, NCCL 2.28.9, NVLS off), captured in
    CUDA graphs, 44 (batch, context) points: within 10% median and every point within 6% (1.4% / 4.8% today). The
    model's two all-reduces per layer dominate at small batches (5.1 ms at batch 1 and 1K context against 6.3 ms at TP1)."""
    rows = [r for r in h200_rows("serve_tp2.jsonl") if r.kind == "decode" and r.graphs]
    assert len(rows) == 44
    assert median_abs_error(rows) < 0.10
    assert max(abs(r.error) for r in rows) < 0.06


def test_tp2_eager_decode_counts_the_collectives_host_time():
    """Without graphs each all-reduce is issued through torch.distributed (24.5 us of host time measured on the
    same machine by nccl_host_and_memory.py, against 7.2 us for a kernel): 64 of them move the host-bound batch-1
    step from 11.5 to 13.1 ms. The measured eager steps are 15.9-19.3 ms: the two ranks' hosts do not issue in
    lockstep (not modelled), so the model stays optimistic, by at most 35%."""
    rows = [r for r in h200_rows("serve_tp2.jsonl") if r.kind == "decode" and not r.graphs]
    assert len(rows) == 5
    assert all(r.predicted_s == pytest.approx(13.11e-3, rel=0.01) for r in rows)
    assert all(-0.35 < r.error < 0 for r in rows)
