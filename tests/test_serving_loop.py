"""The serving loop (simulator/serving/loop.py) against hand-worked schedules and queueing theory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.serving.loop import LoopCosts, LoopLimits, poisson_arrivals, run_loop, saturation_rate
from simulator.serving.rate import closed_loop_point, rate_point

MS = 1e-3

#: decode 10 ms a step whatever the batch; prefill 1 ms per token computed
FLAT = LoopCosts(decode_s=lambda seqs, context: 10 * MS, prefill_s=lambda seqs, new, past: seqs * new * MS)


def test_preemption_by_recompute_hand_schedule():
    """Two requests (prompt 2, output 3) at t = 0 in a cache of 6 one-token pages:
    step 1 prefills both (4 tokens, 4 ms; pages 4); step 2 decodes both (10 ms; pages 6); step 3: A needs a 7th page,
    so B (admitted last) is preempted and freed, A decodes alone (10 ms) and finishes at 24 ms; step 4 recomputes
    B's prompt and its 2 generated tokens (4 tokens, 4 ms) and samples its third token: B finishes at 28 ms."""
    run = run_loop(np.zeros(2), 2, 3, FLAT, LoopLimits(kv_blocks=6, block_tokens=1))
    assert run.preemptions == 1
    assert run.steps == 4
    assert run.first_token_s == pytest.approx([4 * MS, 4 * MS])
    assert run.finish_s == pytest.approx([24 * MS, 28 * MS])
    assert run.blocks_peak == 6
    assert run.step_batches == (2, 2, 1, 1)


def test_without_pressure_no_preemption():
    """The same two requests with 8 pages: prefill 4 ms, two decode steps of both, done at 24 ms."""
    run = run_loop(np.zeros(2), 2, 3, FLAT, LoopLimits(kv_blocks=8, block_tokens=1))
    assert run.preemptions == 0
    assert run.finish_s == pytest.approx([24 * MS, 24 * MS])


def test_cache_caps_the_batch():
    """Pages of 4 tokens, 10 of them: a request of prompt 8 takes 2 pages at admission, so 5 are admitted at once
    and the other 5 wait for pages."""
    run = run_loop(np.zeros(10), 8, 1, FLAT, LoopLimits(kv_blocks=10, block_tokens=4))
    assert run.step_batches[0] == 5
    assert run.blocks_peak <= 10


def test_token_budget_chunks_the_prompt():
    """max_batched_tokens 3 splits a prompt of 7 into 3 + 3 + 1 (1 ms per token): the first token at 7 ms."""
    run = run_loop(np.zeros(1), 7, 1, FLAT, LoopLimits(kv_blocks=100, block_tokens=1, max_batched_tokens=3))
    assert run.steps == 3
    assert run.first_token_s == pytest.approx([7 * MS])


def test_low_load_ttft_is_one_prefill():
    """Requests far apart (0.01 requests/s against ~30 ms of work) each find an empty engine: TTFT = the prefill
    of one prompt (100 ms for 100 tokens), TPOT = one decode step, e2e = TTFT + (output - 1) TPOT."""
    arrivals = poisson_arrivals(0.01, 50, seed=1)
    run = run_loop(arrivals, 100, 5, FLAT, LoopLimits(kv_blocks=1000, block_tokens=16))
    m = run.metrics(warmup=0)
    for q in (50, 90, 99):
        assert m[f"ttft_p{q}_s"] == pytest.approx(100 * MS)
        assert m[f"tpot_p{q}_s"] == pytest.approx(10 * MS)
        assert m[f"e2e_p{q}_s"] == pytest.approx(140 * MS)


def test_single_server_queue_matches_pollaczek_khinchine():
    """max_num_seqs 1 and one output token make the engine an M/D/1 queue with service S = 10 ms (a 10-token
    prefill); at rate 50/s (load 0.5) the mean wait is rho S / (2 (1 - rho)) = 5 ms, so the mean TTFT is 15 ms.
    20,000 requests: the sample mean's standard error is about 0.07 ms (wait s.d. ~6.5 ms / sqrt(20000) x the
    autocorrelation of a queue at load 0.5, ~3), so 3% holds with a wide margin."""
    arrivals = poisson_arrivals(50.0, 20_000, seed=7)
    run = run_loop(arrivals, 10, 1, FLAT, LoopLimits(kv_blocks=1000, block_tokens=1, max_num_seqs=1))
    m = run.metrics()
    assert m["ttft_mean_s"] == pytest.approx(15 * MS, rel=0.03)
    assert m["tpot_mean_s"] is None  # one output token: no inter-token time
    assert m["ttft_p50_s"] >= 10 * MS


def test_saturation_rate_of_a_single_server():
    """The same M/D/1 engine serves at most 1 / S = 100 requests/s."""
    sat = saturation_rate(10, 1, FLAT, LoopLimits(kv_blocks=1000, block_tokens=1, max_num_seqs=1), 400)
    assert sat == pytest.approx(100.0)


def test_above_saturation_is_unstable():
    """At twice the saturation rate the queue grows (half the requests still wait when the last arrives) and the
    point says so instead of giving latencies."""
    limits = LoopLimits(kv_blocks=1000, block_tokens=1, max_num_seqs=1)
    p = rate_point(200.0, 100.0, replicas=1, gpus=1, input_len=10, output_len=1, num_requests=2000, seed=3,
                   costs=FLAT, limits=limits)
    assert p["stable"] is False
    assert p["ttft_p50_s"] is None and p["e2e_p99_s"] is None
    assert p["waiting_at_last_arrival"] > 800
    assert p["requests_per_s"] == pytest.approx(100.0)
    below = rate_point(50.0, 100.0, replicas=1, gpus=1, input_len=10, output_len=1, num_requests=2000, seed=3,
                       costs=FLAT, limits=limits)
    assert below["stable"] is True and below["ttft_p50_s"] >= 10 * MS
    assert below["waiting_at_last_arrival"] < 20


def test_replicas_split_the_rate():
    """Four replicas at 200 requests/s each see 50/s: the latencies of one replica at 50/s."""
    limits = LoopLimits(kv_blocks=1000, block_tokens=1, max_num_seqs=1)
    four = rate_point(200.0, 100.0, replicas=4, gpus=8, input_len=10, output_len=1, num_requests=500, seed=3,
                      costs=FLAT, limits=limits)
    one = rate_point(50.0, 100.0, replicas=1, gpus=2, input_len=10, output_len=1, num_requests=500, seed=3,
                     costs=FLAT, limits=limits)
    assert four["ttft_p90_s"] == one["ttft_p90_s"]
    assert four["tokens_per_s_per_gpu"] == pytest.approx(200.0 / 8)


def test_a_sequence_larger_than_the_cache_is_refused():
    with pytest.raises(ValueError, match="K/V pages"):
        run_loop(np.zeros(1), 10, 10, FLAT, LoopLimits(kv_blocks=4, block_tokens=4))
    with pytest.raises(ValueError, match="whole prompt"):
        run_loop(np.zeros(1), 10, 10, FLAT, LoopLimits(100, 4, max_batched_tokens=12, chunked_prefill=False))


def test_without_chunking_prompts_wait_for_a_whole_step():
    """Budget 10 tokens, no chunked prefill, prompts of 6: the second prompt does not fit beside the first (6 + 6 >
    10) and waits; step 1 prefills one prompt (6 ms), step 2 decodes it (1 token) and prefills the other (10 + 6 ms)."""
    run = run_loop(np.zeros(2), 6, 2, FLAT, LoopLimits(100, 1, max_batched_tokens=10, chunked_prefill=False))
    assert run.step_batches[:2] == (1, 2)
    assert run.first_token_s == pytest.approx([6 * MS, 22 * MS])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), prompt=st.integers(1, 40), output=st.integers(1, 12), block=st.integers(1, 8),
       spare=st.integers(0, 60), budget=st.one_of(st.none(), st.integers(1, 64)), seqs=st.one_of(st.none(),
       st.integers(1, 8)), seed=st.integers(0, 1000))
def test_every_request_finishes_within_the_cache(n, prompt, output, block, spare, budget, seqs, seed):
    """Whatever the pressure: every request finishes, pages never exceed the cache, the first token comes at least
    one prefill of the prompt (1 ms a token) after the arrival and no later than the last."""
    pages = -(-(prompt + output) // block) + spare
    arrivals = poisson_arrivals(50.0, n, seed)
    run = run_loop(arrivals, prompt, output, FLAT, LoopLimits(pages, block, budget, seqs))
    assert run.blocks_peak <= pages
    assert np.all(run.first_token_s - run.arrival_s >= prompt * MS - 1e-12)
    assert np.all(run.finish_s >= run.first_token_s)
    assert not np.isnan(run.finish_s).any()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), prompt=st.integers(1, 60), output=st.integers(1, 40), block=st.integers(1, 16),
       spare=st.integers(0, 80), budget=st.one_of(st.none(), st.integers(1, 100)), seqs=st.one_of(st.none(),
       st.integers(1, 10)), rate=st.floats(1.0, 200.0), seed=st.integers(0, 1000), chunked=st.booleans())
def test_decode_runs_equal_single_steps(n, prompt, output, block, spare, budget, seqs, rate, seed, chunked):
    """Runs of pure decode steps applied at once give the schedule of the one-step-at-a-time scheduler exactly."""
    import simulator.serving.loop as loop

    costs = LoopCosts(decode_s=lambda b, c: MS * (5 + 0.1 * b + 0.001 * c * b),
                      prefill_s=lambda k, new, past: 0.1 * MS * k * new * (1 + past / 1000) + 2 * MS)
    if not chunked and budget is not None:
        budget = max(budget, prompt + output)  # a whole prompt and its recomputed outputs fit one step
    limits = LoopLimits(-(-(prompt + output) // block) + spare, block, budget, seqs, chunked)
    arrivals = poisson_arrivals(rate, n, seed)
    fast = run_loop(arrivals, prompt, output, costs, limits)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(loop, "_decode_run", lambda *args: 0)
        slow = run_loop(arrivals, prompt, output, costs, limits)
    assert fast.finish_s == pytest.approx(slow.finish_s)
    assert fast.first_token_s == pytest.approx(slow.first_token_s)
    assert (fast.steps, fast.preemptions, fast.step_batches, fast.blocks_peak) == \
        (slow.steps, slow.preemptions, slow.step_batches, slow.blocks_peak)


def test_closed_loop_sends_the_next_request_when_one_finishes():
    """Concurrency 1, three requests of prompt 2 / output 3: each takes 2 ms of prefill and two 10 ms decode steps,
    and the next is sent when it finishes: finishes at 22, 44, 66 ms; the benchmark's throughput is 9 tokens in
    66 ms."""
    run = run_loop(np.zeros(1), 2, 3, FLAT, LoopLimits(kv_blocks=100, block_tokens=1), refill=2)
    assert run.arrival_s == pytest.approx([0, 22 * MS, 44 * MS])
    assert run.finish_s == pytest.approx([22 * MS, 44 * MS, 66 * MS])
    p = closed_loop_point(1, 3, replicas=1, gpus=1, input_len=2, output_len=3, costs=FLAT,
                          limits=LoopLimits(kv_blocks=100, block_tokens=1))
    assert p["tokens_per_s"] == pytest.approx(9 / (66 * MS))
    assert p["ttft_p50_s"] == pytest.approx(2 * MS)
