"""The TensorRT-LLM rows (simulator/validation/trtllm_h200.py: NVIDIA's H200 launch blog, TensorRT-LLM v0.5 FP8
static batches, under the ``tensorrt_llm_v0_5`` profile), pinned at their honest errors: an open target of issue 28
(its rows within 10%), so a change to the serving model shows here. Nothing is fitted to them."""

import pytest

from simulator.validation.trtllm_h200 import HBM_BYTES, ROWS, kv_fit, trtllm_rows, xqa_rows

#: predicted / published - 1 per row, in ROWS order (2026-12-04, h47). Before: +1.3, -16.3, -15.5, +31.8, +118.6,
#: +18.3, +18.2% (profile tensorrt_llm, 16-bit K/V, flash-decoding, TensorRT-LLM 1.0's custom all-reduce, 8192-token
#: prefill chunks). Why each moved:
#: - 13B rows (MHA: 40 K/V heads, so the masked MHA reads the cache once, as before): the FP8 K/V cache halves the
#:   decode step's cache read: 11,968 -> 15,275 (+29.2%), 3,975 -> 6,813 (+43.4%), 1,140 -> 1,475 (+9.3%);
#: - 70B 512 x 128/128 (TP 1): the masked MHA reads each of the 8 K/V heads once per query head (8x the cache),
#:   partly offset by the FP8 cache: decode step 68.8 -> 90.0 ms, +31.8% -> +13.8%;
#: - 70B 512 x 128/2048 (TP 2): the same (mean step 68.6 -> 125.6 ms: attention at 2K context dominates), NCCL's
#:   all-reduce (v0.5 had no custom kernel) 14.2 -> 7.0 ms a step: +118.6% -> +21.1%;
#: - 70B 64 / 32 x 2048/128: the 8x cache read at 2K context, decode 30.8 -> 60.2 ms and 25.5 -> 40.2 ms:
#:   +18.3% -> +0.7%, +18.2% -> +2.2%. The prefill (one forward of the whole batch, no token budget) moves < 1%.
PINNED = (0.2924, 0.4342, 0.0934, 0.1378, 0.2113, 0.0066, 0.0220)


@pytest.fixture(scope="module")
def rows():
    return trtllm_rows()


def test_rows_are_the_blogs_table(rows):
    assert [(r.model, r.batch, r.tp, r.input_len, r.output_len, r.published) for r in rows] == list(ROWS)
    # throughput per GPU is batch x output tokens / end-to-end time / GPUs: the 13B batch-1024 row at 15,275 tok/s
    assert rows[0].predicted == pytest.approx(15_275, rel=1e-3)


def test_errors_at_their_pinned_values(rows):
    assert [r.error for r in rows] == pytest.approx(PINNED, abs=5e-4)
    within = sum(abs(e) <= 0.10 for e in PINNED)
    assert within == 3                                   # the target (every row within 10%) is not met


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
    XQA, 2.40x): the model's masked MHA against a kernel reading each K/V head once gives 2.37x; both absolute
    values are about 60% high (a run of TensorRT-LLM v0.7a-0.8a whose benchmark the blog does not name)."""
    mmha, xqa = xqa_rows()
    assert xqa.predicted / mmha.predicted == pytest.approx(2.372, abs=5e-3)
    assert (mmha.error, xqa.error) == pytest.approx((0.612, 0.594), abs=5e-3)
