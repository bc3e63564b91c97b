"""TTFT, TPOT, end-to-end latency and throughput of a serving scenario (docs/serving/outputs.md defines every output key):
:func:`serve` puts together the request's phases (phases.py), the K/V capacity (kv_capacity.py), the curve over
concurrency (curve.py), disaggregation (disagg.py) and the request-rate loop (loop_inputs.py, rate.py) into a
:class:`~simulator.serving.result.ServeResult`.

Static batch (the top-level numbers): ``batch`` sequences per replica are prefilled together (in chunks of
``max_batched_tokens`` when set), then decoded together for ``output_len`` steps.
- ``ttft_s`` = prefill time; ``tpot_s`` = mean decode step over the ``output_len`` steps (contexts ``input_len`` ..
  ``input_len + output_len - 1``); ``e2e_s = ttft + (output_len - 1) tpot``;
- ``tokens_per_s`` = replicas x batch x output_len / e2e (generated tokens); ``total_tokens_per_s`` counts the
  prompt tokens too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.errors import UserError
from simulator.memory import MemoryReport
from simulator.plan import ResolvedPlan
from simulator.plan.rules import check_serving_degrees
from simulator.serving.curve import concurrency_curve
from simulator.serving.disagg import kv_transfer
from simulator.serving.kv_capacity import kv_capacity
from simulator.serving.loop_inputs import loop_costs, loop_limits
from simulator.serving.phases import decode_time, mean_decode_s, prefill_time
from simulator.serving.rate import rate_curve
from simulator.serving.result import ServeResult
from simulator.serving.step import StepContext, kv_window


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
