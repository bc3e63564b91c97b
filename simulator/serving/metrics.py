"""TTFT, TPOT, end-to-end latency and throughput of a serving scenario, and the latency-throughput curve over
concurrency (docs/serving.md defines every output key).

Static batch (the top-level numbers): ``batch`` sequences per replica are prefilled together (in chunks of
``max_batched_tokens`` when set), then decoded together for ``output_len`` steps.
- ``ttft_s`` = prefill time; ``tpot_s`` = mean decode step over the ``output_len`` steps (contexts ``input_len`` ..
  ``input_len + output_len - 1``); ``e2e_s = ttft + (output_len - 1) tpot``;
- ``tokens_per_s`` = replicas x batch x output_len / e2e (generated tokens); ``total_tokens_per_s`` counts the
  prompt tokens too.

Curve (continuous batching in steady state, closed loop of ``c`` requests in the system, ``b = c / replicas`` per
replica, at most ``kv_capacity_seqs_steady``: sequences of staggered ages hold ``input_len + output_len / 2`` tokens on
average, so more fit than at full length; more requests queue): each iteration decodes ``b`` sequences at the mean
context and admits ``b / output_len`` new prompts (one finishes per ``output_len`` iterations per sequence slot), so
``iteration = decode(b) + (b / output_len) x prefill(1 sequence)``; ``tpot = iteration``; a new request waits half an
iteration, then rides one iteration with its prefill: ``ttft = iteration / 2 + prefill(1) + decode(b)``; Little's law
gives ``tokens_per_s = replicas x b x output_len / e2e``. With fixed lengths only the wait for the next iteration
varies between requests, uniform on [0, iteration): the q-quantiles are ``ttft_pQ = prefill(1) + decode(b) + q x
iteration`` and ``e2e_pQ`` likewise (p50, p90, p99).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import UserError
from simulator.memory import MemoryReport
from simulator.memory.inference import inference_memory
from simulator.memory.kv_window import KvWindow
from simulator.plan import Batch, ResolvedPlan
from simulator.plan.rules import check_serving_degrees
from simulator.serving.disagg import disagg_point, kv_transfer
from simulator.serving.host import layout_bytes, with_host
from simulator.serving.loop import LoopCosts, LoopLimits
from simulator.serving.rate import rate_curve
from simulator.serving.scheduler import engine_budget_bytes, kv_blocks, profile_peak, step_limits
from simulator.serving.speculative import speculative_decode_time, with_draft
from simulator.serving.step import StepContext, StepTime, captured, kv_window, mixed_step_time, step_time

#: latency quantiles of the curve (fixed lengths: only the wait for the next iteration varies)
PERCENTILES = (0.5, 0.9, 0.99)
#: vLLM's max_num_batched_tokens without chunked prefill: max(max_model_len, this) (vllm/config.py,
#: SchedulerConfig.__post_init__, _DEFAULT_MAX_NUM_BATCHED_TOKENS)
VLLM_MIN_BATCHED_TOKENS = 2048
#: the request-rate loop prices decode steps of up to this many sequences exactly, larger ones on a grid
EXACT_DECODE_BATCH = 64
#: grid batches per doubling above EXACT_DECODE_BATCH (64, 72, 80, ..., 128, 144, ...)
GRID_PER_OCTAVE = 8
#: decode steps sampled for the mean over output_len (the step is linear in the context between regime changes)
MEAN_SAMPLES = 9


@dataclass(frozen=True)
class ServeResult:
    """Everything ``simulator serve`` prints (``to_dict()``: docs/serving.md)."""

    header: dict[str, Any]
    prefill: StepTime
    prefill_tokens: int
    decode: StepTime
    decode_mean_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    replicas: int
    gpus: int
    kv_capacity_seqs: int
    kv_capacity_seqs_steady: int
    memory: MemoryReport
    curve: tuple[dict, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    disaggregation: dict | None = None
    kv_capacity_blocks: int = 0
    saturation_request_rate: float | None = None
    rate_curve: tuple[dict, ...] = ()

    @property
    def tokens_per_s(self) -> float:
        s = self.header["serving"]
        return self.replicas * s["batch"] * s["output_len"] / self.e2e_s

    def summary(self) -> dict[str, Any]:
        """The key serving numbers as flat ``serve.*`` keys (regression goldens, sweeps)."""
        d = self.to_dict()
        row = {"serve.prefill_s": self.prefill.step_s, "serve.decode_step_s": self.decode.step_s,
               "serve.decode_mean_step_s": self.decode_mean_s, "serve.ttft_s": self.ttft_s,
               "serve.tpot_s": self.tpot_s, "serve.e2e_s": self.e2e_s,
               "serve.tokens_per_s": d["throughput"]["tokens_per_s"],
               "serve.tokens_per_s_per_gpu": d["throughput"]["tokens_per_s_per_gpu"],
               "serve.kv_capacity_seqs": self.kv_capacity_seqs,
               "serve.kv_capacity_seqs_steady": self.kv_capacity_seqs_steady}
        for p in self.curve:
            c = p["concurrency"]
            row.update({f"serve.curve.{c}.tpot_s": p["tpot_s"], f"serve.curve.{c}.ttft_s": p["ttft_s"],
                        f"serve.curve.{c}.tokens_per_s_per_gpu": p["tokens_per_s_per_gpu"]})
        if self.rate_curve:
            row["serve.saturation_request_rate"] = self.saturation_request_rate
            for p in self.rate_curve:
                r = f"{p['request_rate']:g}"
                row[f"serve.rate.{r}.stable"] = float(p["stable"])
                row.update({f"serve.rate.{r}.{k}": p[k] for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
                                                                   "e2e_p99_s", "tokens_per_s_per_gpu")
                            if p[k] is not None})
        return row

    def to_dict(self) -> dict[str, Any]:
        s = self.header["serving"]
        total = self.replicas * s["batch"] * (s["input_len"] + s["output_len"]) / self.e2e_s
        return {
            **self.header,
            "prefill": {**self.prefill.to_dict(), "tokens": self.prefill_tokens},
            "decode": {**self.decode.to_dict(), "mean_step_s": self.decode_mean_s},
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
            "throughput": {"tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.gpus,
                           "total_tokens_per_s": total, "requests_per_s": self.replicas * s["batch"] / self.e2e_s,
                           "tokens_per_s_per_user": 1.0 / self.tpot_s, "replicas": self.replicas},
            "kv_capacity_seqs": self.kv_capacity_seqs, "kv_capacity_seqs_steady": self.kv_capacity_seqs_steady,
            "memory": {**self.memory.to_dict(), "hbm_bytes": self.memory.hbm_capacity_bytes, "oom": self.memory.oom},
            "curve": list(self.curve),
            "kv_capacity_blocks": self.kv_capacity_blocks,
            "saturation_request_rate": self.saturation_request_rate,
            "rate_curve": list(self.rate_curve),
            "disaggregation": self.disaggregation,
            "warnings": list(self.warnings),
        }


def prefill_time(ctx: StepContext, rp: ResolvedPlan, seqs: int) -> tuple[StepTime, int]:
    """Prefill of ``seqs`` prompts of ``input_len`` (chunks of ``max_batched_tokens`` tokens when set): the sum of
    its steps, their breakdowns summed; returns it and the prompt tokens."""
    s = ctx.serving
    budget = s.max_batched_tokens or seqs * s.input_len
    chunk = min(s.input_len, budget)
    per_step = max(1, min(seqs, budget // chunk))
    steps: list[StepTime] = []
    done = 0
    while done < seqs:
        n = min(per_step, seqs - done)
        for past in range(0, s.input_len, chunk):
            new = min(chunk, s.input_len - past)
            steps.append(step_time(ctx, rp, Batch(n, new, past), phase="prefill", graphs=False))
        done += n
    return _sum_steps(steps), seqs * s.input_len


def _sum_steps(steps: list[StepTime]) -> StepTime:
    if len(steps) == 1:
        return steps[0]
    keys = steps[0].breakdown_s
    return StepTime(step_s=sum(t.step_s for t in steps), gpu_s=sum(t.gpu_s for t in steps),
                    kernels=sum(t.kernels for t in steps),
                    breakdown_s={k: sum(t.breakdown_s[k] for t in steps) for k in keys},
                    comm=steps[0].comm)


def decode_time(ctx: StepContext, rp: ResolvedPlan, seqs: int, past: int) -> StepTime:
    """One decode step of ``seqs`` sequences with ``past`` cached tokens each; with pipeline parallelism the
    sequences form ``min(pp, seqs)`` micro-batches in flight together (vLLM's virtual engines). With
    ``serving.speculative`` one iteration (drafts and verify) over its expected tokens (serving/speculative.py)."""
    if ctx.serving.speculative is not None:
        return speculative_decode_time(ctx, rp, seqs, past)
    m = min(rp.parallel.pp, seqs)
    per = math.ceil(seqs / m)
    return step_time(ctx, rp, Batch(per, 1, past), phase="decode", graphs=captured(ctx.serving, per), microbatches=m)


def mean_decode_s(ctx: StepContext, rp: ResolvedPlan, seqs: int) -> float:
    """Mean decode step over contexts input_len .. input_len + output_len - 1 (trapezoid over sampled steps)."""
    s = ctx.serving
    if s.output_len == 1:
        return decode_time(ctx, rp, seqs, s.input_len).step_s
    points = np.unique(np.linspace(0, s.output_len - 1, min(MEAN_SAMPLES, s.output_len)).round().astype(int))
    times = np.array([decode_time(ctx, rp, seqs, s.input_len + int(i)).step_s for i in points])
    return float(np.trapezoid(times, points) / (points[-1] - points[0]))


def kv_capacity(memory: MemoryReport, seqs: int, tokens: int = 1, block: int = 1, occupancy: float | None = None, *,
                utilization: float, window: KvWindow | None = None) -> int:
    """Sequences a replica's KV cache can hold: the engine's budget (:func:`engine_budget_bytes` at
    ``utilization``) minus everything but the cache on the fullest stage, over the cache one sequence takes there.
    The memory report holds ``seqs`` sequences of ``tokens`` each; a sequence here occupies ``occupancy`` tokens
    (default ``tokens``), rounded up to whole pages of ``block`` tokens (vLLM's paged cache); with ``window`` both
    counted as the full-equivalent tokens a sliding-window cache holds (simulator/memory/kv_window.py)."""
    occupied, tokens = ((math.ceil((occupancy or tokens) / block) * block, tokens) if window is None
                        else (window.tokens(occupancy or tokens), window.tokens(tokens)))
    budget = engine_budget_bytes(memory, utilization)
    best = None
    for st in memory.stages:
        kv = sum(i.bytes for i in st.items if i.name == "kv_cache")
        if kv <= 0:
            continue
        free = budget - (st.peak - kv)
        n = max(0, math.floor(free / (kv / (seqs * tokens) * occupied)))
        best = n if best is None else min(best, n)
    return best if best is not None else 0


def curve_point(ctx: StepContext, rp: ResolvedPlan, concurrency: int, capacity: int, prefill_one: float,
                gpus: int) -> dict:
    """One point of the latency-throughput curve (module docstring)."""
    s = ctx.serving
    b = max(1, math.ceil(concurrency / rp.dp))
    limited = b > capacity          # capacity >= 1: concurrency_curve refuses a cache that holds no sequence
    b = min(b, capacity)
    decode = decode_time(ctx, rp, b, s.input_len + s.output_len // 2).step_s
    iteration = decode + b / s.output_len * prefill_one
    ttft = iteration / 2 + prefill_one + decode
    e2e = ttft + (s.output_len - 1) * iteration
    tps = rp.dp * b * s.output_len / e2e
    # the wait for the next iteration is uniform on [0, iteration): its quantile q adds q x iteration
    quantiles = {f"{name}_p{int(q * 100)}_s": base + q * iteration for q in PERCENTILES
                 for name, base in (("ttft", prefill_one + decode), ("e2e", e2e - iteration / 2))}
    return {"concurrency": concurrency, "batch_per_replica": b, "kv_limited": limited, "ttft_s": ttft,
            "tpot_s": iteration, "e2e_s": e2e, "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / gpus,
            "tokens_per_s_per_user": 1.0 / iteration, **quantiles}


def serve(ctx: StepContext, rp: ResolvedPlan, memory: MemoryReport, header: dict[str, Any],
          notes: tuple[str, ...] = (), base: Path = Path(".")) -> ServeResult:
    """Predict a serving scenario (module docstring). ``rp`` is the scenario's plan; ``memory`` its serving
    memory for ``batch`` sequences of ``input_len + output_len`` tokens; ``base``: the folder workload files are
    relative to."""
    s = ctx.serving
    check_serving_degrees(rp.parallel)
    prefill, tokens = prefill_time(ctx, rp, s.batch)
    decode, mean = decode_time(ctx, rp, s.batch, s.input_len), mean_decode_s(ctx, rp, s.batch)
    e2e = prefill.step_s + (s.output_len - 1) * mean
    window = kv_window(ctx)
    capacity = kv_capacity(memory, s.batch, s.input_len + s.output_len, s.kv_block_size,
                           utilization=s.gpu_memory_utilization, window=window)
    # continuous batching staggers the sequences: on average each holds input_len + output_len / 2 tokens
    steady = kv_capacity(memory, s.batch, s.input_len + s.output_len, s.kv_block_size,
                         s.input_len + s.output_len / 2, utilization=s.gpu_memory_utilization, window=window)
    warnings = list(notes)
    if memory.oom or capacity < s.batch:
        warnings.append(f"OUT OF MEMORY: the KV cache of {s.batch} sequences of {s.input_len + s.output_len} tokens "
                        f"does not fit; about {capacity} fit per replica")
    curve: tuple[dict, ...] = ()
    disagg = None
    if s.disaggregation is not None:
        if s.disaggregation.prefill_replicas >= rp.dp:
            raise UserError(f"prefill_replicas ({s.disaggregation.prefill_replicas}) must leave at least one of the "
                            f"{rp.dp} DP replicas to decode", key_path="serving.disaggregation.prefill_replicas")
        disagg = {"prefill_replicas": s.disaggregation.prefill_replicas,
                  "decode_replicas": rp.dp - s.disaggregation.prefill_replicas,
                  "kv_transfer": kv_transfer(ctx, rp, s.disaggregation.prefill_replicas)}
    if s.concurrency:
        curve = concurrency_curve(ctx, rp, memory, steady, disagg)
        if any(p["kv_limited"] for p in curve):
            warnings.append(f"the KV cache holds at most {steady} staggered sequences per replica: larger "
                            "concurrencies queue (their batch is capped)")
    limits = loop_limits(ctx, rp, memory)
    blocks = limits.kv_blocks
    saturation, rates = None, ()
    if s.request_rate:
        if blocks * s.kv_block_size < s.input_len + s.output_len:
            raise UserError(f"the K/V cache holds {blocks * s.kv_block_size} tokens per replica, less than one "
                            f"sequence of {s.input_len + s.output_len}: no request rate can be served",
                            key_path="serving.request_rate")
        try:
            saturation, rates = rate_curve(s.request_rate, replicas=rp.dp, gpus=rp.world_size, input_len=s.input_len,
                                           output_len=s.output_len, num_requests=s.num_requests, seed=s.arrival_seed,
                                           costs=loop_costs(ctx, rp), limits=limits, workload=s.workload, base=base)
        except ValueError as exc:  # a request the engine can never admit
            raise UserError(f"a request cannot be served: {exc}", key_path="serving.request_rate") from None
        if not all(p["stable"] for p in rates):
            warnings.append(f"request rates at or above {saturation:.4g} requests/s (the saturation rate) are "
                            "unstable: the queue grows without bound, no latency is given")
    return ServeResult(header=header, prefill=prefill, prefill_tokens=tokens, decode=decode, decode_mean_s=mean,
                       ttft_s=prefill.step_s, tpot_s=mean, e2e_s=e2e, replicas=rp.dp, gpus=rp.world_size,
                       kv_capacity_seqs=capacity, kv_capacity_seqs_steady=steady, memory=memory, curve=curve,
                       warnings=tuple(warnings), disaggregation=disagg, kv_capacity_blocks=blocks,
                       saturation_request_rate=saturation, rate_curve=rates)


def concurrency_curve(ctx: StepContext, rp: ResolvedPlan, memory: MemoryReport, steady: int,
                      disagg: dict | None) -> tuple[dict, ...]:
    """The latency-throughput curve over ``serving.concurrency`` (module docstring), each replica's batch capped
    at ``steady`` staggered sequences; no sequence fitting is a user error (:func:`no_room_for_a_sequence`)."""
    s = ctx.serving
    if steady == 0:
        raise no_room_for_a_sequence(memory, s)
    one, _ = prefill_time(ctx, rp, 1)
    if disagg is None:
        return tuple(curve_point(ctx, rp, c, steady, one.step_s, rp.world_size) for c in s.concurrency)

    def decode_s(b: int) -> float:
        return decode_time(ctx, rp, b, s.input_len + s.output_len // 2).step_s

    return tuple(disagg_point(ctx, rp, c, steady, one.step_s, disagg["kv_transfer"]["time_s"], decode_s,
                              rp.world_size) for c in s.concurrency)


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


def no_room_for_a_sequence(memory: MemoryReport, s) -> UserError:
    """Why the K/V cache holds no sequence, blamed on the key whose value breaks it (on the stage with the most
    besides its cache): the weights alone over the engine's share (``serving.gpu_memory_utilization``); one sequence
    (its prefill's transients and its cache) over what the weights leave (``serving.input_len``, with
    ``output_len``); else the transients of a prefill of ``serving.batch`` sequences together (they grow with the
    batch). A key the user did not write is marked ``(default)``."""
    gib, budget = 2**30, engine_budget_bytes(memory, s.gpu_memory_utilization)
    tokens = s.input_len + s.output_len
    util = f"gpu_memory_utilization {s.gpu_memory_utilization:g}" + (
        "" if "gpu_memory_utilization" in s.model_fields_set else " (default)")
    share = f"the engine's share of HBM ({util}: {budget / gib:.1f} GiB per GPU)"

    def kv_of(st) -> float:
        return sum(i.bytes for i in st.items if i.name == "kv_cache")

    st = max((st for st in memory.stages if kv_of(st) > 0), key=lambda st: st.peak - kv_of(st))  # kv_capacity's 0
    weights, transients = st.bucket("weights"), st.bucket("transient")
    if weights >= budget:
        return UserError(f"the K/V cache holds no sequence: the weights alone ({weights / gib:.1f} GiB per GPU) fill "
                         f"{share}; raise serving.gpu_memory_utilization or spread the weights over more GPUs",
                         key_path="serving.gpu_memory_utilization")
    cache = kv_of(st) / (s.batch * tokens) * math.ceil(tokens / s.kv_block_size) * s.kv_block_size
    if weights + transients / s.batch + cache > budget:
        return UserError(f"the K/V cache holds no sequence: one sequence of input_len {s.input_len:,} + output_len "
                         f"{s.output_len:,} = {tokens:,} tokens needs {cache / gib:.1f} GiB of K/V cache and "
                         f"{transients / s.batch / gib:.1f} GiB of prefill transients per GPU, more than the "
                         f"{(budget - weights) / gib:.1f} GiB the weights leave of {share}; shorten the sequences "
                         "or spread the model over more GPUs", key_path="serving.input_len")
    return UserError(f"the K/V cache holds no sequence: the transients of a prefill of batch {s.batch:,} x input_len "
                     f"{s.input_len:,} tokens ({transients / gib:.1f} GiB per GPU) and the weights "
                     f"({weights / gib:.1f} GiB) fill {share}; lower serving.batch (one sequence of "
                     f"{tokens:,} tokens alone fits)", key_path="serving.batch")
