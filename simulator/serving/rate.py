"""The request-rate curve (``serving.request_rate``): per offered rate, the serving loop of
:mod:`simulator.serving.loop` run on one replica, and the replica's saturation rate (docs/serving/request_rate.md).

DP replicas: a router spreading Poisson arrivals at random over ``replicas`` replicas gives each a Poisson stream of
``rate / replicas`` (thinning), so one replica is simulated and the system's throughput is ``replicas`` times its
own. A round-robin or least-loaded router smooths the arrivals: this is the burstier, conservative case.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simulator.implementation.workload import Workload
from simulator.serving.bench import workload_stream
from simulator.serving.loop import LoopCosts, LoopLimits, poisson_arrivals, run_loop, saturation_rate


def _stream(workload: Workload | None, rate: float, input_len: int, output_len: int, n: int, seed: int,
            block: int, base: Path) -> tuple:
    """One replica's requests at ``rate`` requests/s: Poisson arrivals of fixed lengths (seed ``seed``), or the
    workload's lengths, prefix hits and arrival process (seed ``workload.seed``) at that rate."""
    if workload is None:
        return poisson_arrivals(rate, n, seed), input_len, output_len, None
    w = workload.model_copy(update={"arrival": workload.arrival.model_copy(update={"rate": rate})})
    return workload_stream(w, input_len, output_len, n, block, base)


def rate_point(rate: float, saturation: float, *, replicas: int, gpus: int, input_len: int, output_len: int,
               num_requests: int, seed: int, costs: LoopCosts, limits: LoopLimits, workload: Workload | None = None,
               base: Path = Path(".")) -> dict:
    """One point of the curve: the loop's latencies at ``rate`` requests/s to the whole system, or ``stable:
    false`` with no latencies when the rate per replica reaches the replica's ``saturation`` rate. With a workload
    the requests have its lengths and prefix hits, and arrive by its process at that rate."""
    per_replica = rate / replicas
    times, ins, outs, cached = _stream(workload, per_replica, input_len, output_len, num_requests, seed,
                                       limits.block_tokens, base)
    run = run_loop(times, ins, outs, costs, limits, cached=cached)
    out_mean = float(np.mean(outs))
    stable = bool(per_replica < saturation)
    served = min(per_replica, saturation) * replicas  # requests/s the system completes in the long run
    point = {"request_rate": rate, "stable": stable, "utilization": per_replica / saturation,
             "requests_per_s": served, "tokens_per_s": served * out_mean,
             "tokens_per_s_per_gpu": served * out_mean / gpus,
             "batch_mean": run.batch_mean, "batch_max": run.batch_max, "preemptions": run.preemptions,
             "kv_blocks_peak": run.blocks_peak, "waiting_at_last_arrival": run.waiting_at_last_arrival}
    metrics = run.metrics()
    if not stable:  # the queue grows without bound: a finite run's latencies mean nothing
        metrics = {k: (None if k.endswith("_s") else v) for k, v in metrics.items()}
    return {**point, **metrics}


def rate_curve(rates: tuple[float, ...], *, replicas: int, gpus: int, input_len: int, output_len: int,
               num_requests: int, seed: int, costs: LoopCosts, limits: LoopLimits, workload: Workload | None = None,
               base: Path = Path(".")) -> tuple[float, tuple[dict, ...]]:
    """The replica's saturation rate times ``replicas`` (requests/s) and one point per offered rate; with a workload
    the saturation run serves its lengths and prefix hits (all queued at t = 0)."""
    _, ins, outs, cached = _stream(workload, 1.0, input_len, output_len, num_requests, seed, limits.block_tokens,
                                   base)
    saturation = saturation_rate(ins, outs, costs, limits, num_requests, cached=cached)
    points = tuple(rate_point(r, saturation, replicas=replicas, gpus=gpus, input_len=input_len,
                              output_len=output_len, num_requests=num_requests, seed=seed, costs=costs,
                              limits=limits, workload=workload, base=base) for r in rates)
    return saturation * replicas, points


def closed_loop_point(concurrency: int, num_requests: int, *, replicas: int, gpus: int, input_len: int,
                      output_len: int, costs: LoopCosts, limits: LoopLimits) -> dict:
    """``vllm bench serve --max-concurrency C --request-rate inf --num-prompts N`` through the loop: ``C`` requests
    in flight over the system (``ceil(C / replicas)`` per replica), the next sent when one finishes, ``N`` in all;
    throughput as the benchmark reports it, total output tokens over the run's duration (ramp and drain included)."""
    per = math.ceil(concurrency / replicas)
    n = max(per, math.ceil(num_requests / replicas))
    run = run_loop(np.zeros(per), input_len, output_len, costs, limits, refill=n - per)
    tokens_per_s = replicas * n * output_len / run.duration_s
    return {"concurrency": concurrency, "requests": n * replicas, "tokens_per_s": tokens_per_s,
            "tokens_per_s_per_gpu": tokens_per_s / gpus, "preemptions": run.preemptions, **run.metrics(warmup=0.0)}
