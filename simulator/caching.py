"""Every process-wide cache of the simulator, owned in one place: pure functions of hashable (frozen) arguments
memoised with :func:`memo` (``functools.lru_cache``, bounded), and results kept by the identity of immutable
arguments too costly to hash (:class:`IdentityCache`). :func:`clear_caches` empties all of them (a benchmark's cold
repeat; the results are the same afterwards, only slower). A cache is keyed by the arguments of the function it
serves, never by a tuple built beside the call: adding an input to the function adds it to the key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: the caches :func:`clear_caches` empties (each registers itself when its module is imported)
_CACHES: list[Any] = []


def memo(maxsize: int = 256) -> Callable:
    """``functools.lru_cache(maxsize)`` for a pure function of hashable arguments, registered for
    :func:`clear_caches`."""
    def wrap(fn: Callable) -> Callable:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _CACHES.append(cached)
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
        if hit is not None and all(a is b for a, b in zip(hit[0], objects, strict=True)):
            return hit[1]
        if len(self._entries) >= self.maxsize:
            self._entries.clear()
        value = self.compute(objects, values)
        self._entries[key] = (objects, value)
        return value

    def cache_clear(self) -> None:
        self._entries.clear()


def clear_caches() -> None:
    """Empty every registered cache."""
    for cache in _CACHES:
        cache.cache_clear()
