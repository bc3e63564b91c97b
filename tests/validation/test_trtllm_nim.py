"""The tensorrt_llm profile's NIM rows (simulator/validation/trtllm_nim.py: NIM 1.8.0's TensorRT-LLM engine serving
Llama 3.3 70B FP8 on two H100, AIPerf at fixed concurrency), pinned at their honest errors so a change to the serving
model shows here. Nothing is fitted to them; issue 28's target for the profile (a row within 10%) is met by the
concurrency-1 TTFT rows and the 5000/500 concurrency-5 row."""

import pytest

from simulator.validation.trtllm_nim import LLAMA33_70B, nim_rows, predict, published_rows, wave_ttfts

#: (input, output) -> (TTFT, ITL, output tokens/s) errors at concurrency 1 (2026-12-04, h49). The single prefill is
#: within 10% but for the 200-token prompt (-18.7%: 31 ms published for a ~25 ms forward, the serving stack's fixed
#: cost); the decode step is 11-14% short of the published ITL at every length (16.2-16.5 ms against 18.6-18.9 ms:
#: the model's step is the FP8 weights' read plus the TP all-reduces and launches; whatever else NIM's stack spends a
#: token, the model does not price it), and the output rate is 12-16% high with it.
PINNED_C1 = {(5000, 500): (0.0211, -0.1130, 0.1201), (500, 2000): (0.0544, -0.1387, 0.1606),
             (200, 200): (-0.1873, -0.1370, 0.1597), (1000, 1000): (-0.0112, -0.1277, 0.1459)}


@pytest.fixture(scope="module")
def rows():
    return nim_rows(max_concurrency=1)


def test_data_is_the_pages_tables():
    data = published_rows()
    assert len(data) == 16 and {int(r["concurrency"]) for r in data} == {1, 5, 25, 50}
    first = data[0]
    assert (first["input_len"], first["output_len"], first["ttft_ms"], first["itl_ms"], first["output_tokens_per_s"]) \
        == ("5000", "500", "406.77", "18.58", "51.67")
    # at concurrency 1 the page's throughput is one request's output over its latency: 500 / (0.40677 + 499 x 0.01858)
    assert 500 / (0.40677 + 499 * 0.01858) == pytest.approx(51.67, rel=2e-3)


def test_concurrency_one_errors_pinned(rows):
    assert [(r.input_len, r.output_len) for r in rows] == list(PINNED_C1)
    for r in rows:
        assert r.errors == pytest.approx(PINNED_C1[(r.input_len, r.output_len)], abs=5e-4)
    within = sum(abs(e) <= 0.10 for r in rows for e in r.errors)
    assert within == 3                                   # the three TTFTs; no ITL or throughput at concurrency 1


def test_decode_step_above_the_weight_read(rows):
    """Hand check of the batch-1 ITL: each GPU reads its half of the FP8 weights every step, 80 layers x (8192 x
    (2 x 8192 + 2 x 1024) + 3 x 8192 x 28672) / 2 = 34.2 GB, at most 3.35 TB/s (H100 SXM HBM3): >= 10.2 ms. The model's
    step lies between that floor and the published 18.6-18.9 ms."""
    m = LLAMA33_70B
    h, kv = m["hidden"], m["kv_heads"] * 128
    per_gpu = m["layers"] * (h * (2 * h + 2 * kv) + 3 * h * m["ffn_hidden"]) / 2
    assert per_gpu / 1e9 == pytest.approx(34.23, abs=0.01)
    floor = per_gpu / 3.35e12
    for r in rows:
        assert floor < r.predicted[1] < r.published[1]


def test_concurrency_five_long_prompt_within_ten_percent():
    """5000 in / 500 out at concurrency 5: TTFT +6.6%, ITL -5.6%, output tokens/s +5.3% (published 546.7 ms,
    21.83 ms, 218.48 tok/s)."""
    ttft, itl, tps = predict(5000, 500, 5)
    assert (ttft / 0.5467 - 1, itl / 0.02183 - 1, tps / 218.48 - 1) == pytest.approx((0.0662, -0.0561, 0.0526),
                                                                                       abs=5e-4)


def test_per_request_stagger_does_not_break_the_waves():
    """1000 in / 1000 out at concurrency 5 (published mean TTFT 145.6 ms; 82.5 ms alone). Both clients start every
    request at once (docs/engine_host.md, "Closed-loop clients"), so the model's only stagger is the API server's
    per-request time. Without it each wave of 5 is one 5000-token forward: every TTFT 381.4 ms. With 1 ms (or 5 ms)
    per request, the first request of the run is prefilled alone and the other four arrive during its 81.5 ms
    forward and are prefilled together in the next: the group of four finishes in one step, its refills come back
    1 ms apart and again land in one step, so the split (one alone at 98.3 ms, four together at 389.9 ms) repeats
    every wave: mean 331.6 ms, still +128% (h52, 2026-12-04). A stagger splits a group only if it exceeds a step
    (16-82 ms here), which no per-request cost found does (docs/engine_host.md)."""
    locked = wave_ttfts(1000, 1000, 5, 0.0)
    assert all(t == pytest.approx(0.3814, abs=1e-3) for wave in locked for t in wave)
    for request_s in (0.001, 0.005):
        waves = wave_ttfts(1000, 1000, 5, request_s)
        for wave in waves[1:]:
            assert wave[0] == pytest.approx(0.0983, abs=1e-3)
            assert wave[1:] == pytest.approx([0.3899] * 4, abs=1e-3)
        mean = sum(sum(w) for w in waves[1:]) / (4 * 5)
        assert mean / 0.14562 - 1 == pytest.approx(1.28, abs=0.01)
