"""The entries: each takes a loaded scenario and drives the packages below it. ``simulate`` (memory and the
training step), ``simulate_serving`` (prefill/decode, TTFT/TPOT, throughput), sweeps and the regression run; the plan
search (:mod:`simulator.search`) and multimodal training (:mod:`simulator.multimodal`) stand in the same layer."""

from simulator.entries.serve import simulate_serving
from simulator.entries.simulate import Result, simulate

__all__ = ["Result", "simulate", "simulate_serving"]
