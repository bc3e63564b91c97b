"""The plan search's process-wide state. :func:`clear_process_caches` empties every process-wide cache a search
fills outside its own context (whose :class:`~simulator.schedule.cache.StepCache` and tables go with it): the pure
functions memoised with :func:`simulator.caching.memo` and the identity caches of :mod:`simulator.caching`, so that
a benchmark's repeat starts cold (``benchmarks/search_throughput.py``); :func:`without_cycle_collector` pauses
Python's cyclic collector while a batch of candidates is evaluated."""

from __future__ import annotations

import gc
from contextlib import contextmanager

from simulator.caching import clear_caches


def clear_process_caches() -> None:
    """Empty every process-wide cache a search fills (the results are the same afterwards, only slower)."""
    clear_caches()


@contextmanager
def without_cycle_collector():
    """Pause Python's cyclic garbage collector (restored after): evaluating a batch allocates many short-lived
    objects, none of them in reference cycles that outlive it (freed by reference counting), while each full
    collection walks every object the search holds (its rows and caches); that cost 10-30% of a search's CPU
    time here (docs/search/throughput.md). On resuming, what survived the batch is moved to the oldest generation
    at once (``gc.freeze`` then ``gc.unfreeze``), where a young collection right after would have walked all of it;
    skipped when something else holds objects frozen. Numbers are unaffected."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
