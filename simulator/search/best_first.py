"""One best-first order for every plan a bounded search times (docs/search/time_to_answer.md, round 11).

Before, the groups of the batched schedules (GPipe, 1F1B, interleaved) were timed first, best bound first, and the
groups of the schedules timed alone (DualPipe, DualPipeV, ZB-H1, ZB-V) after them, against the threshold the others
left. Where a split schedule wins (530B, 1T), the batched groups were timed with no threshold near the answer:
110 of the 137 plans the 530B search timed were 1F1B plans none of which came within 5% of the 10th best.

Now one heap holds three kinds of item, each with a lower bound of the step of the plans it stands for:
- a *part* of a batched group: its members of one (recompute value, micro-batch, TP overlap value), bounded by
  ``Group.sub`` (:mod:`.group_bound`); evaluated by timing them (their timelines batched);
- a part of a split-schedule group, bounded the same way; evaluated by the per-plan lower bounds of its members
  (:func:`~simulator.search.evaluate.evaluate_points` with ``lower_only``: rules, memory, the step's chunk costs
  and :func:`~simulator.search.bound.step_lower_bound`), each of which goes back on the heap as
- a *plan* timed alone, bounded by its own lower bound; evaluated by timing it.

Rounds take items best bound first (ties: parts before plans, parts by their outer values and key, plans by their
point's values) up to about ``batch`` candidates (a plan timed alone counts :data:`ALONE_WEIGHT`); after each round
the threshold is the ``exact_top``-th best plan timed so far (:func:`~simulator.search.bound.bound_of`). Once the
next item's bound is excluded, it and every item after it are pruned: a part's members counted under
:data:`~simulator.search.group_bound.GROUP_REASON`, a plan under :data:`~simulator.search.bound.BOUND_REASON`. Every
pruned plan is slower than ``exact_top`` timed plans (each bound is a lower bound of its plans' steps), so the first
``exact_top`` plans are those of a search that times everything. Until ``exact_top`` plans are timed there is no
threshold, so a search where nothing fits evaluates every item (and names memory, as before). The order and the
rounds depend only on bounds and values, not on the executor.

The memory bound (:func:`~simulator.search.memory_bound.skip_key`) runs on a (recompute value, micro-batch) of a
group when its first part is taken (``admit``), not on every group up front: on the Korthikanti problems 531 of
1,285 (175B), 228 of 530 (530B) and 775 of 1,755 (1T) keys of the groups reached are taken (round 12; round 11 bounded
every key of a reached group). What it leaves out is counted under its reason then, and neither timed nor counted
again; the members of keys never taken are counted under :data:`~simulator.search.group_bound.GROUP_REASON`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from simulator.search.bound import BOUND_REASON, Bound, reachable
from simulator.search.evaluated import Evaluated
from simulator.search.group_bound import GROUP_REASON, Group, part_key
from simulator.search.rank import OBJECTIVES

#: what timing one plan alone counts for in a round's size: the split-schedule timelines cost several batched
#: plans each (their F, B, W graphs); 8 of them made a round before round 11
ALONE_WEIGHT = 8


@dataclass(frozen=True)
class Item:
    """A part (``points``, ``alone``: of a split-schedule group) or a plan timed alone (``plan``), and the lower
    bound of its plans' steps (seconds; 0: none) with their tokens per step and GPUs (module docstring)."""

    lower: float
    tokens: float
    gpus: int
    points: list[dict[str, Any]] = field(default_factory=list)
    alone: bool = False
    plan: dict[str, Any] | None = None
    group: Group | None = None
    """a part's group (:func:`time_best_first`'s ``admit`` runs once per (group, recompute value, micro-batch))"""
    key: tuple = ()
    """a part's :func:`~simulator.search.group_bound.part_key`"""
    refined: bool = False
    """a part whose bound ``refine`` already tightened (:func:`time_best_first`)"""

    @property
    def size(self) -> int:
        return ALONE_WEIGHT if self.plan is not None else len(self.points)


def time_best_first(out: Evaluated, groups: list[Group], alone: Callable[[Group], bool], objective: str,
                    exact_top: int, run: Callable[..., Evaluated], bound_of: Callable[..., Bound | None],
                    batch: int, admit: Callable[[Group, tuple, list], set[int]] | None = None,
                    refine: Callable[[Group, tuple, set[str]], dict[str, float]] | None = None) -> None:
    """Time the plans of ``groups`` into ``out`` best bound first (module docstring); ``alone(g)``: whether the
    group's schedule is timed plan by plan; ``run(points, **kwargs)`` evaluates on the executor (``recount``: the
    points were counted before, by their lower bounds). ``admit(g, (value, mb), members)`` runs once per
    (recompute value, micro-batch) of a group, when its first part is taken, with every member of it (all TP
    overlap values), and returns the ids of those it leaves out (the memory bound, which counts them: so it runs
    only for the keys the time bound reaches); the parts of that key then keep the others. ``refine(g, key,
    shardings)``, called when a part is first taken, may return a larger lower bound for the members of some of its
    shardings (:mod:`~simulator.search.dp_floor`): those members go back on the heap as a part of their own with
    it."""
    larger = OBJECTIVES[objective][1]
    admitted = _Admission(admit)
    heap = _parts(groups, alone, larger, admitted.by_key)
    made = len(heap)
    while heap:
        parts, plans, bounded, taken, later = _round(heap, bound_of(out.rows, objective, exact_top), batch, admitted,
                                                     refine)
        for item in later:      # members with a tighter bound (refine): after this round's
            sort = (reachable(item.lower, item.tokens, item.gpus, larger), 0, tuple(item.group.outer.values()),
                    item.key)
            heapq.heappush(heap, (sort, made, item))
            made += 1
        if not taken and not later:
            break
        if parts:           # in the order the parts were made (the space's: a smaller micro-batch first)
            out.merge(run([p for _, points in sorted(parts, key=itemgetter(0)) for p in points]))
        if plans:           # counted when their parts were bounded: only their rows
            out.rows += run(plans, recount=True).rows
        if bounded:         # the split parts' members: each with its own bound back on the heap
            first = run(bounded, bound=bound_of(out.rows, objective, exact_top), lower_only=True)
            waiting, first.bounds = first.bounds, []
            out.merge(first)
            for lower, tokens, gpus, point in waiting:
                key = (reachable(lower, tokens, gpus, larger), 1, tuple(point.values()))
                heapq.heappush(heap, (key, made, Item(lower, tokens, gpus, plan=point)))
                made += 1
    for _, _, item in heap:
        if item.plan is not None:
            out.rejected[BOUND_REASON] += 1
            continue
        gone = admitted.gone.get(_slot(item))   # a part of an admitted key: what admit() left out is counted
        n = len(item.points) if not gone else sum(id(p) not in gone for p in item.points)
        out.rejected[GROUP_REASON] += n
        out.evaluated += n


@dataclass
class _Admission:
    """``admit`` (:func:`time_best_first`) once per (group, recompute value, micro-batch), what it left out kept."""

    admit: Callable[[Group, tuple, list], set[int]] | None
    gone: dict[tuple, set[int]] = field(default_factory=dict)
    """(id of the group, value, micro-batch) -> ids of the members admit() left out"""
    by_key: dict[tuple, list[dict[str, Any]]] = field(default_factory=dict)
    """(id of the group, value, micro-batch) -> its members (:func:`_parts` fills it)"""

    def members(self, item: Item) -> list[dict[str, Any]]:
        """The members of part ``item`` that ``admit`` keeps (a refined part's were admitted before it was)."""
        if self.admit is None or item.group is None or item.refined:
            return item.points
        slot = _slot(item)
        if (gone := self.gone.get(slot)) is None:
            gone = self.gone[slot] = self.admit(item.group, item.key[:2], self.by_key[slot])
        return [p for p in item.points if id(p) not in gone] if gone else item.points


def _slot(item: Item) -> tuple:
    """(id of its group, recompute value, micro-batch) of a part (:class:`_Admission`)."""
    return id(item.group), item.key[0], item.key[1]


def _parts(groups: list[Group], alone: Callable[[Group], bool], larger: bool,
           by_key: dict[tuple, list[dict[str, Any]]]) -> list[tuple]:
    """The heap of every group's parts: (sort key, sequence, :class:`Item`); the sequence is unique, so items are
    never compared. ``by_key``: filled with each (group, recompute value, micro-batch)'s members."""
    heap = []
    for g in groups:
        members: dict[tuple, list[dict[str, Any]]] = {}
        for p in g.points:
            members.setdefault(part_key(p), []).append(p)
        outer, split = tuple(g.outer.values()), alone(g)
        for (value, mb, _), points in members.items():
            by_key.setdefault((id(g), value, mb), []).extend(points)
        for k, points in members.items():
            lower = g.sub.get(k, g.lower)       # no bound of its own: no member passes the rules
            item = Item(lower, g.tokens, g.outer["gpus"], points, split, group=g, key=k)
            heap.append(((reachable(lower, g.tokens, g.outer["gpus"], larger), 0, outer, k), len(heap), item))
    heapq.heapify(heap)
    return heap


def _round(heap: list[tuple], bound: Bound | None, batch: int, admitted: _Admission, refine=None
           ) -> tuple[list, list, list, int, list[Item]]:
    """The next round's items off ``heap``, best first up to about ``batch`` candidates (a part's members that
    ``admit`` keeps, :func:`time_best_first`), stopping at the first one ``bound`` excludes (left on the heap):
    (batched parts with their sequence, plans timed alone, split parts' members, how many items were taken, the
    parts of members whose bound ``refine`` tightened, for the heap)."""
    parts, plans, bounded, size, taken, later = [], [], [], 0, 0, []
    while heap and (not size or size + heap[0][2].size <= batch):
        item = heap[0][2]
        if bound is not None and item.lower > 0 and bound.excludes(item.lower, item.tokens, item.gpus):
            break
        _, place, _ = heapq.heappop(heap)
        taken += 1
        if item.plan is not None:
            plans.append(item.plan)
            size += item.size
            continue
        points = admitted.members(item)
        if refine is not None and not item.refined and points:
            points = _refine(item, points, refine, later)
        size += len(points)
        if item.alone:
            bounded += points
        elif points:
            parts.append((place, points))
    return parts, plans, bounded, taken, later


def _refine(item: Item, points: list[dict[str, Any]], refine, later: list[Item]) -> list[dict[str, Any]]:
    """The members of part ``item`` whose bound ``refine`` does not tighten; the others, per sharding, as parts of
    their own with the tighter bound into ``later``."""
    tighter = {h: lower for h, lower in refine(item.group, item.key, {p["sharding"] for p in points}).items()
               if lower > item.lower}
    if not tighter:
        return points
    now: list[dict[str, Any]] = []
    by: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        (by.setdefault(p["sharding"], []) if p["sharding"] in tighter else now).append(p)
    later += [Item(tighter[h], item.tokens, item.gpus, members, item.alone, group=item.group, key=(*item.key, h),
                   refined=True) for h, members in by.items()]
    return now
