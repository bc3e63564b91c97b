"""What the request-rate loop (serving/loop.py) is given for a scenario: the engine's limits
(:func:`loop_limits`: tokens and sequences per step, K/V pages) and its step prices (:func:`loop_costs`: decode,
prefill and mixed steps from the step model, memoized, with the engine's host time); docs/serving/request_rate.md."""

from __future__ import annotations

import functools
import math

from simulator.memory import MemoryReport
from simulator.memory.inference import inference_memory
from simulator.plan import Batch, ResolvedPlan
from simulator.serving.host import layout_bytes, with_host
from simulator.serving.loop import LoopCosts, LoopLimits
from simulator.serving.phases import decode_time
from simulator.serving.scheduler import kv_blocks, profile_peak, step_limits
from simulator.serving.speculative import with_draft
from simulator.serving.step import StepContext, kv_window, mixed_step_time, step_time

#: vLLM's max_num_batched_tokens without chunked prefill: max(max_model_len, this) (vllm/config.py,
#: SchedulerConfig.__post_init__, _DEFAULT_MAX_NUM_BATCHED_TOKENS)
VLLM_MIN_BATCHED_TOKENS = 2048
#: the request-rate loop prices decode steps of up to this many sequences exactly, larger ones on a grid
EXACT_DECODE_BATCH = 64
#: grid batches per doubling above EXACT_DECODE_BATCH (64, 72, 80, ..., 128, 144, ...)
GRID_PER_OCTAVE = 8


def loop_limits(ctx: StepContext, rp: ResolvedPlan, memory: MemoryReport) -> LoopLimits:
    """The request-rate loop's engine: steps of at most ``max_batched_tokens`` tokens (chunked prefill; else vLLM's
    ``max(max_model_len, 2048)`` with whole prompts) and the pages the engine's memory rule gives (``kv_blocks``)
    beside the weights (and its MoE kernels' layout), the runtime and the step's or start-up profile's transients."""
    s = ctx.serving
    tokens, seqs = step_limits(s.scheduler, rp, rp.weight_dtype(ctx.gpu), memory.hbm_capacity_bytes or 0.0,
                               s.input_len, s.output_len, (s.max_batched_tokens, s.max_num_seqs))
    budget, window = tokens or max(s.input_len + s.output_len, VLLM_MIN_BATCHED_TOKENS), kv_window(ctx)
    step_memory = with_draft(ctx, rp, inference_memory(rp, memory.hbm_capacity_bytes, Batch(1, budget), window,
                                                       **profile_peak(s.scheduler, budget, seqs)))
    blocks = kv_blocks(s.scheduler, step_memory, budget, s.kv_block_size, s.gpu_memory_utilization,
                       "gpu_memory_utilization" in s.model_fields_set, rp.parallel.tp * rp.parallel.pp, window,
                       layout_bytes(s.scheduler, rp))
    return LoopLimits(blocks, s.kv_block_size, budget, seqs, scheduler=s.scheduler, kv_window=window,
                      chunked_prefill=tokens is not None and (s.scheduler is None or s.scheduler.chunked_prefill))


def loop_costs(ctx: StepContext, rp: ResolvedPlan) -> LoopCosts:
    """The loop's step prices from the step model, memoized.

    - Decode: linear in the mean context between ``input_len`` and ``input_len + output_len - 1`` (decode attention
      reads ``seqs x context`` cached tokens, linear in the context; nothing else depends on it); exact in the batch
      up to ``EXACT_DECODE_BATCH``, above it linear between grid batches ``GRID_PER_OCTAVE`` to a doubling (12.5%
      apart: the step is smooth in the batch there, and a saturated engine visits hundreds of batch sizes).
    - Prefill: a group of ``seqs`` chunks of ``new`` tokens on ``past`` cached ones, with ``new`` and ``past`` rounded
      up to whole K/V pages (chunk boundaries after a step's decodes are arbitrary; a page is what the cache
      allocates): at most ``kv_block_size - 1`` tokens more per chunk, exact for page-aligned prompts."""
    s = ctx.serving
    lo, hi = s.input_len, s.input_len + s.output_len - 1
    page, spec = s.kv_block_size, s.speculative is not None  # speculation: host time in the iteration's price

    @functools.cache
    def decode_ends(seqs: int) -> tuple[float, float]:
        a = decode_time(ctx, rp, seqs, lo).step_s
        return a, (decode_time(ctx, rp, seqs, hi).step_s if hi > lo else a)

    def decode_at(seqs: int, context: float) -> float:
        a, b = decode_ends(seqs)
        return a if hi == lo else a + (b - a) * (context - lo) / (hi - lo)

    def decode_s(seqs: int, context: float) -> float:
        if seqs <= EXACT_DECODE_BATCH:
            return decode_at(seqs, context)
        step = 2 ** (seqs.bit_length() - 1) // GRID_PER_OCTAVE
        below = seqs // step * step
        if below == seqs:
            return decode_at(seqs, context)
        w = (seqs - below) / step
        return (1 - w) * decode_at(below, context) + w * decode_at(below + step, context)

    @functools.cache
    def prefill_pages(seqs: int, new: int, past: int) -> float:
        return step_time(ctx, rp, Batch(seqs, new, past), phase="prefill", graphs=False).step_s

    def prefill_s(seqs: int, new: int, past: int) -> float:
        return prefill_pages(seqs, -(-new // page) * page, -(-past // page) * page)

    @functools.cache
    def mixed_pages(groups: tuple[tuple[int, int, int], ...]) -> float:
        return mixed_step_time(ctx, rp, tuple(Batch(k, n, past) for k, n, past in groups)).step_s

    def mixed_s(groups: tuple[tuple[int, int, float], ...]) -> float:
        """A mixed step, each group's ``new`` (a chunk) and ``past`` rounded up to whole pages as for prefill."""
        return mixed_pages(tuple((k, n if n == 1 else -(-n // page) * page, -(-math.ceil(past) // page) * page)
                                 for k, n, past in groups))

    return with_host(LoopCosts(decode_s=decode_s, prefill_s=prefill_s, mixed_s=mixed_s), s.host, spec)  # host time
