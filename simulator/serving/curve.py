"""The latency-throughput curve over ``serving.concurrency`` (docs/serving/outputs.md defines every key).

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

import math

from simulator.memory import MemoryReport
from simulator.plan import ResolvedPlan
from simulator.serving.disagg import disagg_point
from simulator.serving.kv_capacity import no_room_for_a_sequence
from simulator.serving.phases import decode_time, prefill_time
from simulator.serving.step import StepContext

#: latency quantiles of the curve (fixed lengths: only the wait for the next iteration varies)
PERCENTILES = (0.5, 0.9, 0.99)


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
