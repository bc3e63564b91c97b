"""Serving: prefill and decode step time op by op, TTFT / TPOT / throughput, the latency-throughput curve over
concurrency (docs/serving.md)."""

from simulator.implementation.serving import ServingConfig
from simulator.serving.metrics import serve
from simulator.serving.result import ServeResult

__all__ = ["ServeResult", "ServingConfig", "serve"]
