"""Serving: prefill and decode step time op by op, TTFT / TPOT / throughput, the latency-throughput curve over
concurrency (docs/serving.md)."""

from simulator.implementation.serving import ServingConfig
from simulator.serving.metrics import ServeResult, serve

__all__ = ["ServeResult", "ServingConfig", "serve"]
