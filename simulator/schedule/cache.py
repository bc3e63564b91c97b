"""The one cache of the step: :class:`StepCache`, owned by its caller (a plan search keeps one per search).

Each cached function of the step is pure: ``fn(cache, fixed, args)`` reads nothing but ``fixed`` (the parts one
search never changes: :class:`Fixed`) and ``args`` (a small frozen value object that holds exactly what the
function reads), and ``cache`` only to look up the results of other cached functions. :meth:`StepCache.get`
keeps its result under ``(fixed, args)`` in a table of its own per function, so a plan input that a function
reads is part of its key by construction: there is no key to extend by hand. Plans share an entry when they
agree on everything the function reads (plans that differ only in sharding share chunk bases; plans that differ
only in micro-batch share their stages' DP ops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.compute import ComputeEfficiency
from simulator.hardware import GpuSpec
from simulator.model import ModelSpec
from simulator.moe import MoeSettings
from simulator.plan import ResolvedPlan
from simulator.pricing.groups import LayoutTimes
from simulator.topology import Topology

#: entries kept per cached function before its table is emptied (a search visits sharding and micro-batch
#: innermost, so the plans that share an entry come close together)
TABLE_SIZE = 4096


@dataclass(frozen=True, eq=False)
class Fixed:
    """What one cache's functions read besides their arguments: the model, the GPU, its efficiency table, the
    topology, the collectives calibration and the ``moe:`` settings. Equal by identity: a :class:`StepCache`
    hands out one per combination (:meth:`StepCache.fixed`), so its hash costs nothing and two different ones
    never share an entry."""

    model: ModelSpec
    gpu: GpuSpec
    eff: ComputeEfficiency
    topology: Topology | None = None
    calibration: Any = None
    moe: MoeSettings | None = None


class StepCache:
    """Results of the step's pure functions by their arguments, and each rank layout's
    :class:`~simulator.pricing.groups.LayoutTimes` (group placements and op times). One per plan search (or per
    :func:`simulator.schedule.step.prepare_step` call when none is given); :meth:`clear` empties it."""

    def __init__(self, size: int = TABLE_SIZE) -> None:
        self.size = size
        self._tables: dict[Callable, dict] = {}
        self._layouts: dict[tuple, LayoutTimes] = {}
        self._fixed: Fixed | None = None

    def fixed(self, model: ModelSpec, gpu: GpuSpec, eff: ComputeEfficiency, topology: Topology, calibration,
              moe: MoeSettings) -> Fixed:
        """The :class:`Fixed` of these parts; the cache is emptied first when they are not the ones it holds (by
        identity; the efficiency table and MoE settings by value)."""
        f = self._fixed
        if f is None or not (f.model is model and f.gpu is gpu and f.topology is topology
                             and f.calibration is calibration and (f.eff is eff or f.eff == eff)
                             and (f.moe is moe or f.moe == moe)):
            self.clear()
            f = self._fixed = Fixed(model, gpu, eff, topology, calibration, moe)
        return f

    def layout(self, plan: ResolvedPlan) -> LayoutTimes:
        """The :class:`~simulator.pricing.groups.LayoutTimes` of ``plan``'s rank layout on the fixed topology."""
        f = self._fixed
        if f is None:
            raise ValueError("StepCache.layout before StepCache.fixed")
        key = plan.rank_layout
        times = self._layouts.get(key)
        if times is None:
            if len(self._layouts) >= self.size:
                self._layouts.clear()
            times = self._layouts[key] = LayoutTimes(key, f.topology, f.calibration, f.moe)
        return times

    def get(self, fn: Callable[[StepCache, Fixed, Any], Any], fixed: Fixed, args: Any) -> Any:
        """``fn(self, fixed, args)``, kept under ``(fixed, args)`` in ``fn``'s table."""
        table = self._tables.get(fn)
        if table is None:
            table = self._tables[fn] = {}
        key = (fixed, args)
        try:
            return table[key]
        except KeyError:
            pass
        value = fn(self, fixed, args)
        if len(table) >= self.size:
            table.clear()
        table[key] = value
        return value

    def clear(self) -> None:
        """Empty every table (and forget the fixed parts)."""
        self._tables.clear()
        self._layouts.clear()
        self._fixed = None
