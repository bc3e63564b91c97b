"""The serving loop: an iteration-level simulation of one replica under open-loop (Poisson) arrivals, with a paged
K/V cache that caps the batch and preemption by recompute when it is full (docs/serving/request_rate.md).

Each step's work comes from the engine's policy object (``LoopLimits.scheduler``: simulator/serving/scheduler.py,
docs/engine_schedulers.md: vLLM V1, SGLang, TensorRT-LLM); an engine that runs a step's prefill chunks and decodes as
one forward has the step priced as one batch (``LoopCosts.mixed_s``). Without a scheduler the rule is vLLM V1's,
priced as below:

1. Running requests in admission order each ask for the tokens they still have to compute: 1 for a decoding
   request (the token sampled last step), the rest of the prompt (at most the step's token budget,
   ``max_batched_tokens``) for one being prefilled. Each needs K/V pages for ``computed + new`` tokens; when the
   free pages do not cover it, the most recently admitted running request is preempted: its pages are freed and it
   goes back to the front of the queue with nothing computed, to recompute its prompt and the tokens it already
   generated (vLLM's default, ``PreemptionMode.RECOMPUTE``). A step that preempted admits nobody.
2. Waiting requests, first come first served, are admitted while the token budget, ``max_num_seqs`` and the free
   pages allow (without chunked prefill a prompt is admitted whole or not at all).
3. The step's time is ``decode_s(d, mean context) + sum of prefill_s(k, new, past)`` over the groups of identical
   prefill chunks: a decode step of the ``d`` decoding requests plus the prefill work, each priced op by op by
   :mod:`simulator.serving.step`. The sum is exact for engines that run prefill and decode as separate forward
   passes (SGLang, vLLM V0 without chunked prefill); for a fused mixed batch it counts the weight read twice.
4. A request whose known tokens (prompt + generated) are all computed samples one token; the first is its TTFT, the
   ``output_len``-th ends it and frees its pages.

Metrics are vLLM ``bench serve``'s: TTFT = first token - arrival; TPOT = (finish - first token) / (output_len - 1);
end-to-end = finish - arrival; per request, over the requests that arrive after the first ``WARMUP`` share.

Stability: the replica's saturation rate is measured by the same loop with every request queued at t = 0 (output
completions per second while the queue lasts: :func:`saturation_rate`). An offered rate at or above it makes
the queue grow without bound: the point is ``stable: false`` and its latencies are ``None``, never a finite number
a finite run happened to reach.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simulator.implementation.scheduler import EngineScheduler
from simulator.memory.kv_window import KvWindow
from simulator.serving.scheduler import Pages, policy_of

#: share of the requests (by arrival) left out of the latency statistics: the cold start of an empty system
WARMUP = 0.1
#: latency quantiles reported (vLLM bench serve reports p50 / p90 / p99 among others)
QUANTILES = (50, 90, 99)


@dataclass(frozen=True)
class LoopCosts:
    """Step prices of one replica: ``decode_s(seqs, mean_context)`` for a decode step of ``seqs`` sequences whose
    caches hold ``mean_context`` tokens on average, ``prefill_s(seqs, new, past)`` for ``seqs`` sequences each
    computing ``new`` tokens on ``past`` cached ones."""

    decode_s: Callable[[int, float], float]
    prefill_s: Callable[[int, int, int], float]
    #: one forward over groups ``(seqs, new, past)`` of a mixed step (prefill chunks and decodes as ONE batch:
    #: simulator/serving/step.py ``mixed_step_time``); None: the step is priced as the sum of its groups
    mixed_s: Callable[[tuple[tuple[int, int, float], ...]], float] | None = None
    #: the API server's time per request (``serving.host.request_s``, simulator/serving/host.py): requests reach
    #: the engine one after another, each ``request_s`` after its arrival or the previous one's, whichever is later
    request_s: float = 0.0


@dataclass(frozen=True)
class LoopLimits:
    """The engine's limits: pages of ``block_tokens`` tokens the cache holds, the token budget of a step (None: no
    budget), the largest batch (None: only the cache limits it), and whether a prompt may be split over steps
    (chunked prefill; without it a prompt is admitted whole or waits)."""

    kv_blocks: int
    block_tokens: int
    max_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    chunked_prefill: bool = True
    #: the engine's scheduling policy (simulator/serving/scheduler.py); None: vLLM V1's rule, prefill and decode
    #: priced as two steps (the loop before engine profiles)
    scheduler: EngineScheduler | None = None
    #: sliding-window layers' pages (simulator/memory/kv_window.py); None: every layer holds every token
    kv_window: KvWindow | None = None


@dataclass(eq=False)  # requests are told apart by identity: two with equal fields are still two requests
class _Request:
    arrival: float
    prompt: int
    output: int
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    first_token: float | None = None
    finish: float | None = None
    preempted: int = 0
    cached: int = 0          # prompt tokens whose K/V a prefix cache holds: computed without prefill
    last_token: float = math.nan
    ready: float = math.nan  # when the API server hands it to the engine (arrival + its per-request work)

    @property
    def known(self) -> int:
        return self.prompt + self.generated


@dataclass(frozen=True)
class LoopRun:
    """What one run of the loop did: per-request times (arrival order) and engine counters."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_len: np.ndarray
    steps: int
    preemptions: int
    batch_mean: float
    batch_max: int
    blocks_peak: int
    waiting_at_last_arrival: int
    duration_s: float
    drained_s: float = math.nan
    step_batches: tuple[int, ...] = field(default=(), repr=False)
    #: every inter-token gap of every request (s), as distinct values and how many gaps had each
    itl_s: tuple[np.ndarray, np.ndarray] = field(default=(np.zeros(0), np.zeros(0, int)), repr=False)

    def metrics(self, warmup: float = WARMUP) -> dict:
        """TTFT, TPOT and end-to-end latency (mean and quantiles, seconds) over the requests after the warm-up."""
        start = int(len(self.arrival_s) * warmup)
        arr, first, fin = self.arrival_s[start:], self.first_token_s[start:], self.finish_s[start:]
        series = {"ttft": first - arr, "e2e": fin - arr}
        out_len = self.output_len[start:]
        if (out_len > 1).any():  # TPOT of the requests with more than one output token
            series["tpot"] = ((fin - first) / np.maximum(out_len - 1, 1))[out_len > 1]
        out: dict = {"requests_measured": int(len(arr))}
        for name in ("ttft", "tpot", "e2e"):
            values = series.get(name)
            out[f"{name}_mean_s"] = float(values.mean()) if values is not None else None
            for q in QUANTILES:
                out[f"{name}_p{q}_s"] = float(np.percentile(values, q)) if values is not None else None
        return out


def poisson_arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    """``n`` arrival times (s) of a Poisson process of ``rate`` requests/s: cumulative exponential gaps."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate, n))


def run_loop(arrivals_s: np.ndarray, input_len, output_len, costs: LoopCosts, limits: LoopLimits,
             refill: int = 0, cached: np.ndarray | None = None) -> LoopRun:
    """Serve requests arriving at ``arrivals_s`` (sorted, seconds) through the scheduler of the module docstring.
    ``input_len`` / ``output_len``: tokens of every request, or one per request (arrays); ``cached``: prompt tokens
    per request a prefix cache already holds (they take pages but no prefill; kept over a preemption).
    ``refill``: that many more requests, each sent when one finishes (a closed loop: ``len(arrivals_s)`` requests
    at t = 0 keep that many in flight, as ``vllm bench serve --max-concurrency`` does)."""
    n_arr = len(arrivals_s)
    ins, outs = (np.broadcast_to(np.asarray(v, dtype=np.int64), (n_arr,)) for v in (input_len, output_len))
    hits = np.zeros(n_arr, np.int64) if cached is None else np.asarray(cached, dtype=np.int64)
    _check_limits(int(ins.max(initial=1)), int(outs.max(initial=1)), limits)
    requests = [_Request(float(t), int(i), int(o), computed=int(c), cached=int(c))
                for t, i, o, c in zip(arrivals_s, ins, outs, hits, strict=True)]
    _frontend(requests, costs.request_s)
    gaps: Counter = Counter()
    total = len(requests) + refill
    pages = Pages(limits.kv_blocks, limits.block_tokens, limits.kv_window)
    policy = policy_of(limits.scheduler)
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    now, nxt, steps, preemptions, blocks_peak, last_wait = 0.0, 0, 0, 0, 0, 0
    batches: list[int] = []
    done, drained = 0, math.nan
    while done < total:
        while nxt < len(requests) and requests[nxt].ready <= now:
            waiting.append(requests[nxt])
            nxt += 1
            if nxt == len(requests):
                last_wait = len(waiting)
        nxt_arrival = requests[nxt].ready if nxt < len(requests) else math.inf
        k = policy.decode_run(_decode_run(running, waiting, pages, limits, policy), waiting)
        if k:  # k pure decode steps in a row: priced step by step, applied at once
            k, now = _apply_decode_run(running, pages, costs, k, now, nxt_arrival, gaps)
            policy.after_decode(k)
            steps += k
            batches.extend([len(running)] * k)
            blocks_peak = max(blocks_peak, pages.used)
            ended = _finish(running, pages, now)
            done += ended
            _send(requests, min(ended, total - len(requests)), now, costs.request_s)
            continue
        work, preempted = policy.schedule(running, waiting, pages, limits)
        preemptions += preempted
        if not work:
            if not preempted:
                if nxt_arrival == math.inf:  # nothing runs, nothing arrives: the queue can never start
                    raise ValueError(f"the engine's scheduler cannot admit the {len(waiting)} waiting request(s) "
                                     "with nothing else running (a request larger than its admission rule allows)")
                now = nxt_arrival  # idle until the next arrival
            continue
        now += _step_s(work, costs, policy.mixed)
        steps += 1
        batches.append(len(work))
        blocks_peak = max(blocks_peak, pages.used)
        _apply_step(work, now, gaps)
        if nxt == len(requests) and not waiting and math.isnan(drained):
            drained = now  # every request has arrived and been admitted
        ended = _finish(running, pages, now)
        done += ended
        _send(requests, min(ended, total - len(requests)), now, costs.request_s)
    return LoopRun(arrival_s=np.array([r.arrival for r in requests]),
                   first_token_s=np.array([r.first_token for r in requests]),
                   finish_s=np.array([r.finish for r in requests]),
                   output_len=np.array([r.output for r in requests]), steps=steps,
                   preemptions=preemptions, batch_mean=float(np.mean(batches)) if batches else 0.0,
                   batch_max=max(batches, default=0), blocks_peak=blocks_peak, waiting_at_last_arrival=last_wait,
                   duration_s=now, drained_s=drained,
                   step_batches=tuple(batches),
                   itl_s=(np.array(list(gaps), dtype=float), np.array(list(gaps.values()), dtype=np.int64)))


def _frontend(requests: list[_Request], request_s: float, start: int = 0) -> None:
    """When the API server hands each request from ``start`` on to the engine: one after another, ``request_s``
    each (``LoopCosts.request_s``); with 0, at its arrival."""
    prev = requests[start - 1].ready if start else -math.inf
    for r in requests[start:]:
        r.ready = prev = max(r.arrival, prev) + request_s if request_s else r.arrival


def _send(requests: list[_Request], n: int, now: float, request_s: float = 0.0) -> None:
    """The closed loop's client sends ``n`` new requests at ``now`` (one per request that just finished)."""
    if n > 0:
        start = len(requests)
        requests.extend(_Request(now, requests[0].prompt, requests[0].output) for _ in range(n))
        _frontend(requests, request_s, start)


def _check_limits(input_len: int, output_len: int, limits: LoopLimits) -> None:
    """A sequence must fit the cache, and without chunked prefill a whole prompt (with its recomputed outputs after a
    preemption) must fit one step's budget: otherwise a request could never be admitted."""
    biggest = Pages(limits.kv_blocks, limits.block_tokens, limits.kv_window).needed(input_len + output_len - 1)
    if biggest > limits.kv_blocks:
        raise ValueError(f"one sequence of {input_len + output_len} tokens needs {biggest} K/V pages, the cache "
                         f"holds {limits.kv_blocks}")
    budget = limits.max_batched_tokens
    if not limits.chunked_prefill and budget is not None and budget < input_len + output_len - 1:
        raise ValueError(f"without chunked prefill the token budget ({budget}) must hold a whole prompt with its "
                         f"recomputed outputs ({input_len + output_len - 1} tokens)")


def _apply_decode_run(running: list[_Request], pages: Pages, costs: LoopCosts, k: int, now: float,
                      next_arrival: float, gaps: Counter) -> tuple[int, float]:
    """Advance every running request by up to ``k`` decode steps, stopping after the step during which the next
    request arrives (it is admitted at the step boundary); returns the steps taken and the new time."""
    b = len(running)
    mean = sum(r.computed for r in running) / b
    times = np.cumsum([costs.decode_s(b, mean + j) for j in range(k)])
    k = min(k, int(np.searchsorted(now + times, next_arrival)) + 1)
    for r in running:
        r.computed += k
        r.generated += k
        pages.grow(r, r.computed)
        gaps[now + float(times[0]) - r.last_token] += 1
        r.last_token = now + float(times[k - 1])
    for d in np.diff(times[:k]):
        gaps[float(d)] += b
    return k, now + float(times[k - 1])


def _apply_step(work: list[tuple[_Request, int]], now: float, gaps: Counter) -> None:
    """After a step ending at ``now``: each request computed its tokens; one whose known tokens are all computed
    samples the next (the first is its first token; each later one adds its gap to ``gaps``)."""
    for r, n in work:
        r.computed += n
        if r.computed == r.known:
            r.generated += 1
            if r.first_token is None:
                r.first_token = now
            else:
                gaps[now - r.last_token] += 1
            r.last_token = now


def _finish(running: list[_Request], pages: Pages, now: float) -> int:
    """End the running requests that have all their tokens: free their pages; returns how many ended."""
    ended = [r for r in running if r.generated == r.output]
    for r in ended:
        r.finish = now
        pages.free(r)
        running.remove(r)
    return len(ended)


def _decode_run(running: list[_Request], waiting: deque[_Request], pages: Pages, limits: LoopLimits, policy) -> int:
    """How many steps from now are pure decode steps of every running request with nothing else to do (0: the
    next step needs the full scheduler): nobody is prefilling, the queue's head cannot be admitted (the policy's
    ``can_admit``: no seat, or too few free pages: pages only get scarcer while everyone decodes), the token budget
    covers the batch; it ends at the first completion or when the free pages run out."""
    if not running or any(r.generated == 0 or r.computed != r.known - 1 for r in running):
        return 0
    budget = limits.max_batched_tokens
    if budget is not None and budget < len(running):
        return 0
    if waiting and (limits.max_num_seqs is None or len(running) < limits.max_num_seqs) \
            and policy.can_admit(waiting[0], running, pages, limits):
        return 0
    computed = np.array([r.computed for r in running])
    held = np.array([r.blocks for r in running])
    free = pages.total - pages.used

    def extra(k: int) -> int:
        return int(np.maximum(0, pages.needed(computed + k) - held).sum())

    lo, hi = 0, min(r.output - r.generated for r in running)
    while lo < hi:  # the most steps whose page growth fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if extra(mid) <= free else (lo, mid - 1)
    return lo


def _step_s(work: list[tuple[_Request, int]], costs: LoopCosts, mixed: bool = False) -> float:
    """A step's seconds: a decode step of the decoding requests plus each group of identical prefill chunks; for an
    engine that runs them as one forward (``mixed``) a step with prefill chunks is one batch (``costs.mixed_s``)."""
    decoding = [r for r, n in work if n == 1 and r.computed == r.known - 1 and r.generated > 0]
    chunks = Counter((n, r.computed) for r, n in work if not (n == 1 and r.computed == r.known - 1
                                                              and r.generated > 0))
    mean = sum(r.computed for r in decoding) / len(decoding) if decoding else 0.0
    if mixed and chunks and costs.mixed_s is not None:
        groups = ((len(decoding), 1, mean),) if decoding else ()
        return costs.mixed_s(groups + tuple((k, n, past) for (n, past), k in sorted(chunks.items())))
    t = 0.0
    if decoding:
        t += costs.decode_s(len(decoding), mean)
    for (n, past), k in sorted(chunks.items()):
        t += costs.prefill_s(k, n, past)
    return t


#: the saturation run holds at least this many batches' worth of requests (its first and last batch are transients)
SATURATION_BATCHES = 4


def saturation_rate(input_len, output_len, costs: LoopCosts, limits: LoopLimits, n: int,
                    cached: np.ndarray | None = None) -> float:
    """Requests/s one replica sustains with an unbounded queue: requests all queued at t = 0 (``n``, or
    ``SATURATION_BATCHES`` times the largest batch the cache or ``max_num_seqs`` admits, whichever is more), and
    the completions between the first one and the moment the queue empties, per second. Before the first
    completion the engine fills; after the queue empties it drains with no prefill left, which finishes requests
    faster than a loaded engine can: both are left out. Lengths (and ``cached`` prompt tokens) per request as
    :func:`run_loop` takes them; requests beyond the arrays' length repeat them."""
    one = Pages(limits.kv_blocks, limits.block_tokens, limits.kv_window).needed(float(np.mean(input_len)) + 1)
    batch = limits.kv_blocks // max(one, 1)
    if limits.max_num_seqs is not None:
        batch = min(batch, limits.max_num_seqs)
    n = max(n, SATURATION_BATCHES * batch)
    ins, outs = (np.resize(np.asarray(v, dtype=np.int64), n) for v in (input_len, output_len))
    hits = None if cached is None else np.resize(np.asarray(cached, dtype=np.int64), n)
    run = run_loop(np.zeros(n), ins, outs, costs, limits, cached=hits)
    first = float(run.finish_s.min())
    done = int(np.count_nonzero(run.finish_s <= run.drained_s))
    if done < 2 or run.drained_s <= first:
        return float(n / run.duration_s)
    return float((done - 1) / (run.drained_s - first))
