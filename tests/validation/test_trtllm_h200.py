"""The TensorRT-LLM rows (simulator/validation/trtllm_h200.py: NVIDIA's H200 launch blog, TensorRT-LLM v0.5 FP8
static batches, under the ``tensorrt_llm_v0_5`` profile), pinned at their honest errors: a target of issue 28 (its
rows within 10%; met since the masked MHA's rates were measured, h75), so a change to the serving model shows here.
Nothing is fitted to them: the decode kernel's constants come from its own timings
(tests/validation/test_masked_mha_h200.py)."""

import pytest

from simulator.validation.trtllm_h200 import HBM_BYTES, ROWS, kv_fit, trtllm_rows, xqa_rows

#: predicted / published - 1 per row, in ROWS order (2026-12-04, h75: the masked MHA's rates measured on the H200,
#: simulator/validation/data/h200_masked_mha). Before (h47: the masked MHA at torch_sdpa's assumed 0.94 of HBM on
#: every query head's copy of the cache): +29.2, +43.4, +9.3, +13.8, +21.1, +0.7, +2.2%. Why each moved (mean decode
#: step before -> after):
#: - 13B rows (MHA): the FP8 cache streams at 0.639 of HBM (8-byte loads), not 0.94, and the 40 x batch CTAs pay
#:   11 ns each: 43.0 -> 64.5 ms, 18.6 -> 25.2 ms, 17.1 -> 22.8 ms: +29.2 -> -1.9%, +43.4 -> +6.3%, +9.3 -> -3.4%;
#: - 70B rows (GQA, 8 query heads per K/V head): the repeated reads come from the L2, but each query head's CTA
#:   processes its K/V at 3.78e12 elements/s, whatever the element size, where the model read 1-byte elements at
#:   4.5 TB/s: 90.0 -> 124.3 ms (512 x 128/128), 125.6 -> 156.6 ms (TP 2), 60.2 -> 71.4 and 40.2 -> 45.8 ms
#:   (2048/128): +13.8 -> -7.4%, +21.1 -> -2.5%, +0.7 -> -5.0%, +2.2 -> -3.0%. Prefill unchanged.
PINNED = (-0.0194, 0.0627, -0.0342, -0.0738, -0.0252, -0.0501, -0.0302)


@pytest.fixture(scope="module")
def rows():
    return trtllm_rows()


def test_rows_are_the_blogs_table(rows):
    assert [(r.model, r.batch, r.tp, r.input_len, r.output_len, r.published) for r in rows] == list(ROWS)
    # throughput per GPU is batch x output tokens / end-to-end time / GPUs: the 13B batch-1024 row at 11,590 tok/s
    assert rows[0].predicted == pytest.approx(11_590, rel=1e-3)


def test_errors_at_their_pinned_values(rows):
    assert [r.error for r in rows] == pytest.approx(PINNED, abs=5e-4)
    within = sum(abs(e) <= 0.10 for e in PINNED)
    assert within == 7                                   # the target (every row within 10%) is met


def test_three_batches_cannot_hold_a_16_bit_cache():
    """Why the rows take the FP8 K/V cache: 13B 1024 x 256 tokens = 2 x 40 layers x 262,144 x 40 heads x 128 x 2 B =
    214.7 GB, 13B 128 x 2176 = 228.2 GB, 70B TP 2 512 x 2176 = 2 x 80 x 1,114,112 x 4 heads x 128 x 2 B = 182.5 GB
    per GPU: each over the H200's 141 GB before any weight. With 1 B per element every row fits beside its FP8
    weights (13.0 GB for 13B, 69.0 GB / tp for 70B): the largest, 70B TP 2, is 91.3 + 34.5 = 125.8 GB."""
    bf16, fp8 = kv_fit(2), kv_fit(1)
    assert [round(kv / 1e9, 1) for kv, _ in bf16][:2] == [214.7, 228.2] and round(bf16[4][0] / 1e9, 1) == 182.5
    assert [i for i, (kv, w) in enumerate(bf16) if kv > HBM_BYTES] == [0, 1, 4]
    assert all(kv + w < HBM_BYTES for kv, w in fp8)
    assert round((fp8[4][0] + fp8[4][1]) / 1e9, 1) == 125.8


def test_xqa_blog_ratio():
    """The XQA blog's pair (Llama-70B, one H200, batch 192, 128/2048: 1,227 tok/s/GPU with the masked MHA, 2,941 with
    XQA, 2.40x): the model's masked MHA (v0.5.0's rates, measured) against a kernel reading each K/V head once at
    0.94 of HBM gives 2.94x; the masked-MHA row is 30% high and the XQA row 59% high (a run of TensorRT-LLM
    v0.7a-0.8a whose benchmark and kernels the blog does not name: not v0.5's)."""
    mmha, xqa = xqa_rows()
    assert xqa.predicted / mmha.predicted == pytest.approx(2.938, abs=5e-3)
    assert (mmha.error, xqa.error) == pytest.approx((0.300, 0.594), abs=5e-3)
