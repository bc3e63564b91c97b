"""The process-wide caches a plan search fills outside its own context (whose :class:`StepCache` and tables go
with it): pure functions of hashable values kept with ``functools.lru_cache`` in the packages the search reads,
and memory's three tables by identity or value (``memory.estimate``, ``memory.nccl``).
:func:`clear_process_caches` empties them, so that a benchmark's repeat starts cold
(``benchmarks/search_throughput.py``)."""

from __future__ import annotations

from simulator.memory import activations, deepep, estimate, nccl
from simulator.model import flops, spec, strict
from simulator.plan import params, ranks, rules
from simulator.schedule import fast_timeline
from simulator.search import evaluate


def clear_process_caches() -> None:
    """Empty every process-wide cache a search fills (the results are the same afterwards, only slower)."""
    for cached in (fast_timeline._graph, params._stage_params, params._all_stage_params,
                   activations.cached_layer_items, activations.cached_layer_bytes, estimate._states,
                   estimate._scaled_items, estimate._fixed_sum, flops._layer_kinds, flops.model_flops,
                   spec.moe_layer_flags, rules.parse_order, nccl._nccl_bytes, strict._numeric_fields,
                   ranks._grid_groups, evaluate._reason, deepep.normal_buffer_bytes,
                   deepep.low_latency_buffer_bytes):
        cached.cache_clear()
    estimate._SCALED_BY_ID.clear()
    nccl._BY_LAYOUT.clear()
    nccl._FABRICS.clear()
