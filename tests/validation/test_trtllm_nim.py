"""The tensorrt_llm profile's NIM rows (simulator/validation/trtllm_nim.py: NIM 1.8.0's TensorRT-LLM engine serving
Llama 3.3 70B FP8 on two H100, AIPerf at fixed concurrency), pinned at their honest errors so a change to the serving
model shows here. Nothing is fitted to them; issue 28's target for the profile (a row within 10%) is met by the
concurrency-1 TTFT rows and the 5000/500 concurrency-5 row."""

import pytest

from simulator.validation.trtllm_nim import (
    KV_CACHE_DTYPE,
    LLAMA33_70B,
    nim_rows,
    pool_tokens,
    predict,
    published_rows,
    wave_ttfts,
)

#: (input, output) -> (TTFT, ITL, output tokens/s) errors at concurrency 1 (2026-12-04, h62: 8-bit K/V cache). The
#: single prefill is within 10% but for the 200-token prompt (-18.8%: 31 ms published for a ~25 ms forward, the
#: serving stack's fixed cost); the decode step is 12-14% short of the published ITL at every length (16.2-16.3 ms
#: against 18.6-18.9 ms: the model's step is the FP8 weights' read plus the TP all-reduces and launches; whatever else
#: NIM's stack spends a token, the model does not price it), and the output rate is 13-16% high with it.
PINNED_C1 = {(5000, 500): (0.0203, -0.1203, 0.1290), (500, 2000): (0.0537, -0.1408, 0.1634),
             (200, 200): (-0.1877, -0.1374, 0.1602), (1000, 1000): (-0.0119, -0.1298, 0.1486)}

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
    """5000 in / 500 out at concurrency 5: TTFT +6.4%, ITL -8.7%, output tokens/s +8.7% (published 546.7 ms,
    21.83 ms, 218.48 tok/s; with a 16-bit cache, before h62: +6.6, -5.6, +5.3%)."""
    ttft, itl, tps = predict(5000, 500, 5)
    assert (ttft / 0.5467 - 1, itl / 0.02183 - 1, tps / 218.48 - 1) == pytest.approx((0.0644, -0.0875, 0.0868),
                                                                                       abs=5e-4)


def test_page_capacity_rules_out_a_16_bit_cache():
    """Why the scenario's K/V cache is 8-bit (the page does not say; its plateaus, rows left out of scoring, do).
    At concurrency 100-250 the 5000/500 table runs 917-921 tok/s at 92.9-93.2 ms ITL and the 20000/2000 table
    415-427 tok/s at 48.3-50.1 ms: each running request emits a token a step, so about tok/s x ITL requests run at
    once, each holding up to its whole length. A GPU holds its half of the K/V heads: 80 layers x 2 x 4 x 128
    elements a token, 163,840 B at 16 bits. The tokens the engine held would need ~77 GB a GPU at 16 bits, more than
    an 80 GB H100 has beside its 34.2 GB of FP8 weights; at 8 bits ~38 GB fits. The model's pool (the profile's
    memory rule) agrees: 267,504 tokens at 16 bits cannot hold them, 535,024 at 8 bits can (GUARANTEED_NO_EVICT
    then admits 97 and 24 requests where the page ran ~86 and ~21: the model's pool is ~14% larger than the
    engine's, not examined)."""
    per_token_16 = LLAMA33_70B["layers"] * 2 * (LLAMA33_70B["kv_heads"] // 2) * 128 * 2
    assert per_token_16 == 163_840
    held = {(5000, 500): 920.0 * 0.0930, (20000, 2000): 420.0 * 0.0495}   # running requests, tok/s x ITL
    assert held[(5000, 500)] == pytest.approx(85.6, abs=0.1) and held[(20000, 2000)] == pytest.approx(20.8, abs=0.1)
    tokens = {k: n * sum(k) for k, n in held.items()}
    assert min(tokens.values()) > 450_000
    weights = 34.23e9                                      # test_decode_step_above_the_weight_read
    for t in tokens.values():
        assert t * per_token_16 > 80e9 - weights          # 16-bit: cannot fit even with no runtime or activations
        assert t * per_token_16 / 2 < 0.9 * (80e9 - weights)
    assert KV_CACHE_DTYPE == "fp8"
    assert pool_tokens(None) == 267_504 < min(tokens.values()) < max(tokens.values()) < pool_tokens() == 535_024


def test_page_queue_onsets_bracket_the_pool():
    """The same page, where its TTFT jumps from a prefill to a queue (a request waits for another to finish): the
    highest concurrency without the jump and the lowest with it, and the tokens their whole lengths reserve (the
    admission holds every started request's prompt + output). 1000/1000: 558 ms at 200, 3.5 s at 250; 500/2000:
    297 ms at 150, 4.9 s at 200; 5000/500: 835 ms at 50, 8.0 s at 100; 200/200: no jump up to 250 (264 ms);
    20000/2000: 2.9 s at 5, 18.8 s at 25. Every onset lies between 400,000 and 500,000 tokens, and 200 requests of
    1000/1000 (400,000 tokens) ran without a queue: more than the 267,504 a 16-bit pool holds."""
    onsets = {(1000, 1000): (200, 250), (500, 2000): (150, 200), (5000, 500): (50, 100), (20000, 2000): (5, 25)}
    fits = max(sum(k) * ok for k, (ok, _) in onsets.items())
    queues = min(sum(k) * bad for k, (_, bad) in onsets.items())
    assert (fits, queues) == (400_000, 500_000)
    assert pool_tokens(None) < fits < queues < pool_tokens()  # the model's 8-bit pool would not queue at 250


def test_decode_gap_is_a_per_step_constant():
    """What is left in the ITL with the 8-bit cache (h62): the model's step is short of the published ITL by
    1.9-2.7 ms at concurrency 1-5 on every length and 3.1-3.8 ms at 25-50 on the 200-1000-token prompts (the
    5000-token rows, whose cache read dominates, come within 3% at 25-50). A cost per step, about the same at 1 and
    5 sequences, is what the C++ runtime's own per-iteration work (no overlap scheduler in the TensorRT backend) would
    look like; no published measurement of it was found, so none is priced (docs/engine_kernels/trtllm_nim.md)."""
    gaps = {(r.input_len, r.output_len, r.concurrency): (r.published[1] - r.predicted[1]) * 1e3 for r in nim_rows()}
    assert all(1.9 <= g <= 2.7 for (_, _, c), g in gaps.items() if c <= 5)
    assert all(3.0 <= g <= 3.9 for (i, _, c), g in gaps.items() if c >= 25 and i < 5000)
    assert gaps[(5000, 500, 25)] == pytest.approx(0.99, abs=0.05) and gaps[(5000, 500, 50)] == pytest.approx(-0.26,
                                                                                                            abs=0.05)


def test_per_request_stagger_does_not_break_the_waves():
    """1000 in / 1000 out at concurrency 5 (published mean TTFT 145.6 ms; 82.5 ms alone). Both clients start every
    request at once (docs/engine_host.md, "Closed-loop clients"), so the model's only stagger is the API server's
    per-request time. Without it each wave of 5 is one 5000-token forward: every TTFT 381.1 ms. With 1 ms (or 5 ms)
    per request, the first request of the run is prefilled alone and the other four arrive during its 81.5 ms
    forward and are prefilled together in the next: the group of four finishes in one step, its refills come back
    1 ms apart and again land in one step, so the split (one alone at 98.0 ms, four together at 389.6 ms) repeats
    every wave: mean 331.3 ms, still +128% (h52, 2026-12-04; 381.4 / 98.3 / 389.9 / 331.6 ms with the 16-bit cache
    before h62). A stagger splits a group only if it exceeds a step
    (16-82 ms here), which no per-request cost found does (docs/engine_host.md)."""
    locked = wave_ttfts(1000, 1000, 5, 0.0)
    assert all(t == pytest.approx(0.3811, abs=1e-3) for wave in locked for t in wave)
    for request_s in (0.001, 0.005):
        waves = wave_ttfts(1000, 1000, 5, request_s)
        for wave in waves[1:]:
            assert wave[0] == pytest.approx(0.0980, abs=1e-3)
            assert wave[1:] == pytest.approx([0.3896] * 4, abs=1e-3)
        mean = sum(sum(w) for w in waves[1:]) / (4 * 5)
        assert mean / 0.14562 - 1 == pytest.approx(1.28, abs=0.01)
