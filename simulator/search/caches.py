"""The plan search's cold start: :func:`clear_process_caches` empties every process-wide cache a search fills
outside its own context (whose :class:`~simulator.schedule.cache.StepCache` and tables go with it): the pure
functions memoised with :func:`simulator.caching.memo` and the identity caches of :mod:`simulator.caching`, so that
a benchmark's repeat starts cold (``benchmarks/search_throughput.py``)."""

from __future__ import annotations

from simulator.caching import clear_caches


def clear_process_caches() -> None:
    """Empty every process-wide cache a search fills (the results are the same afterwards, only slower)."""
    clear_caches()
