"""Every process-wide cache of the simulator, owned in one place: pure functions of hashable (frozen) arguments
memoised with :func:`memo` (``functools.lru_cache``, bounded), and results kept by the identity of immutable
arguments too costly to hash (:class:`IdentityCache`). A cache is keyed by the arguments of the function it serves,
never by a tuple built beside the call: adding an input to the function adds it to the key.

Two kinds: pricing caches (what a plan's memory and step time compute) and ``loaded`` ones (what is read from a
file or built once per cluster: profiles, presets, coefficient tables, calibrations, topology graphs, placements'
cost models). :func:`clear_caches` empties the pricing caches (a plan search's cold start,
``benchmarks/search_throughput.py``), ``clear_caches(loaded=True)`` every cache; results are the same afterwards, only
slower.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

#: the caches :func:`clear_caches` empties, and those it empties only when asked (``loaded``); each registers itself
#: when its module is imported
_CACHES: list[Any] = []
_LOADED: list[Any] = []


def memo(maxsize: int = 256, *, loaded: bool = False) -> Callable:
    """``functools.lru_cache(maxsize)`` for a pure function of hashable arguments, registered for
    :func:`clear_caches`; ``loaded``: it reads a file or builds what stays fixed for a cluster (module docstring)."""
    def wrap(fn: Callable) -> Callable:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        (_LOADED if loaded else _CACHES).append(cached)
        return cached
    return wrap


class IdentityCache:
    """``compute(objects, values)`` kept by the identity of ``objects`` (immutable objects whose hash would cost
    more than the computation saves: long tuples of memory items, frozen cluster specs) and the value of ``values``
    (small hashables). An entry holds its objects, so an id is never reused while the entry lives, and it is used
    only for the very same objects. Bounded: emptied when full."""

    def __init__(self, compute: Callable, maxsize: int = 4096) -> None:
        self.compute, self.maxsize = compute, maxsize
        self._entries: dict[tuple, tuple[tuple, Any]] = {}
        _CACHES.append(self)

    def __call__(self, objects: tuple, values: tuple = ()):
        key = (tuple(map(id, objects)), values)
        hit = self._entries.get(key)
        if hit is not None and all(map(operator.is_, hit[0], objects)):
            return hit[1]
        if len(self._entries) >= self.maxsize:
            self._entries.clear()
        value = self.compute(objects, values)
        self._entries[key] = (objects, value)
        return value

    def cache_clear(self) -> None:
        self._entries.clear()


def clear_caches(loaded: bool = False) -> None:
    """Empty the pricing caches, and with ``loaded`` the caches of files and clusters too (module docstring)."""
    for cache in _CACHES + (_LOADED if loaded else []):
        cache.cache_clear()
