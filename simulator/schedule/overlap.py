"""Exposed time of communication that may hide behind compute, and the overlap coefficients (data/overlap.yaml).

Rule (every overlap switch): a collective of ``comm_s`` running under ``window_s`` of compute exposes
``max(0, comm_s - window_s)``, and the hidden part still slows the compute by ``interference x hidden`` (NCCL
kernels occupy SMs and HBM bandwidth). Ring steps of CP are matched one-to-one with attention blocks.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml


@cache
def coefficients() -> dict[str, float]:
    """``overlap_interference`` and ``grad_bucket_elements`` from ``data/overlap.yaml``."""
    text = (resources.files("simulator.schedule") / "data" / "overlap.yaml").read_text(encoding="utf-8")
    return {k: float(v["value"]) for k, v in yaml.safe_load(text).items()}


def exposed(comm_s: float, window_s: float, interference: float | None = None) -> float:
    """Seconds a collective of ``comm_s`` adds when it overlaps ``window_s`` of compute (module docstring)."""
    if comm_s <= 0:
        return 0.0
    k = coefficients()["overlap_interference"] if interference is None else interference
    hidden = min(comm_s, max(window_s, 0.0))
    return comm_s - hidden + k * hidden


def exposed_bucketed(comm_s: float, window_s: float, last_bucket_fraction: float) -> float:
    """Gradient reduction overlapped with backward in buckets: at least the last bucket is exposed (it can start
    only when backward ends)."""
    if comm_s <= 0:
        return 0.0
    tail = comm_s * min(1.0, last_bucket_fraction)
    return tail + exposed(comm_s - tail, window_s)
