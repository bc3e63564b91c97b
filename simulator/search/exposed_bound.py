"""The least exposed communication of a group's members: the second term of the group bound
(:mod:`simulator.search.group_bound`; docs/search/time_to_answer.md, "Time to the answer, round 6").

The compute bound (points 1-3 of :mod:`simulator.search.group_bound`) leaves out every second of exposed
communication; on 175B the best plan (tp 8, TP overlap on) spends 1.16 s of its 11.76 s step waiting for TP
collectives. Per stage, FFN kind (dense, MoE) and TP overlap value o, this module gives X_f(o) and X_b(o), the
exposed seconds of one layer's forward and backward in every dimension but EP that every member with value o
pays at least; a chunk's forward of compute variant k is then at least f + sum over its layers of X_f(o)
(backward: b + r + sum X_b(o)). The group's members are bounded per (recompute value, micro-batch, o), and the
group as a whole by the least over the values of o it offers (the better overlap setting). Why:

4. Which ops carry the seconds: a layer's forward and backward :class:`~simulator.schedule.costs.Cost` is priced
   by :func:`~simulator.schedule.costs.layer_costs` from the plan's per-layer ops
   (:func:`simulator.traffic.layer_traffic`: TP, SP, CP, Ulysses, EP), their call seconds on the plan's group
   timer and the windows of the layer's :class:`~simulator.compute.layer.LayerTime`. The ops of scope
   ``layer_fwd`` and ``layer_bwd`` read the outer point (tp, sp, cp, Ulysses, ep, etp), the micro-batch (the
   rank shape), the precision (the recipe's activation bytes) and, of the inner knobs, only the TP overlap
   switch (``tp_comm_overlap``: the window of the forward TP ops). The call seconds read the op and its group's
   placement, which the rank layout of the outer point fixes; the windows and the MoE layer read the variant's
   layer inputs. The recompute mode adds ops of scope ``layer_recompute``, priced apart and added (>= 0); the
   offload and the sharding add host seconds, ZeRO per-micro-batch DP seconds and pipeline transfers, all >= 0,
   elsewhere in the chunk. So a member of variant k with overlap value o has, on every layer of stage s, forward
   exposed seconds (all dimensions) at least those :func:`least_exposed` prices on the variant's representative
   with o (:func:`with_overlap`: the representative with value o, nothing else changed); likewise the backward.
   EP is left out: a DualPipe pair hides part of the EP seconds (:mod:`simulator.search.bound`), and no other
   dimension's.
5. So a member's chunk durations are at least f + X_f and b + r + X_b (the pace scales compute and recompute,
   never communication: ``Cost.scale_compute``), and points 2 and 3 apply unchanged to these larger durations:
   the max-plus timelines are non-decreasing in every duration, and the split schedules' release-plus-busy bound
   takes them as it takes compute (a V's half keeps half of them, as ``dual_timeline.half_total`` halves
   everything but the pipeline transfers, which this term does not count).

Cheap: the layer ops of each overlap value are listed once per variant; the exposure is priced once per (group
timer, layer inputs, MoE layer inputs, cp, pp, ops) through the search's step cache (:class:`ExposureInputs`), and
within that once per stage group key, so groups that differ only in schedule, vpp or split share it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.plan import ResolvedPlan
from simulator.pricing.groups import GroupTimer
from simulator.schedule.cache import Fixed, StepCache
from simulator.schedule.costs import Cost, layer_costs
from simulator.schedule.inputs import LayerInputs, MoeInputs, layer_times, moe_timings
from simulator.traffic import CommOp, layer_traffic


class ExposureInputs(NamedTuple):
    """What :func:`least_exposed` reads: the plan's comm timer (its rank layout), its layer inputs, the MoE layer
    inputs (None without MoE layers on EP > 1), the CP degree, the pipeline depth and, per TP overlap value, the
    per-layer ops of its members (:func:`simulator.traffic.layer_traffic`)."""

    timer: GroupTimer
    layer: LayerInputs
    moe: MoeInputs | None
    cp: int
    pp: int
    settings: tuple[tuple[CommOp, ...], ...]


def least_exposed(cache: StepCache, fixed: Fixed, x: ExposureInputs) -> np.ndarray:
    """Per ops of ``x.settings``, stage and FFN kind (index 0 dense, 1 MoE), the (forward, backward) exposed
    seconds of one layer with those ops and recompute off, every dimension but EP: the least of any member with
    those ops (module docstring, point 4); shape (settings, pp, 2, 2), seconds. Stages whose ops run on groups of
    one key (and one MoE layer) are priced once."""
    layers = dict(cache.get(layer_times, fixed, x.layer))
    moe = cache.get(moe_timings, fixed, x.moe) if x.moe is not None else (None,) * x.pp
    groups = tuple(dict.fromkeys(op.group for ops in x.settings for op in ops))
    out = np.zeros((len(x.settings), x.pp, 2, 2))
    seen: dict[tuple, list[tuple[float, float]]] = {}
    for s in range(x.pp):
        ids = tuple(x.timer.key_id(g, s) for g in groups)
        for kind, lt in layers.items():
            layer_moe = moe[s] if kind else None
            key = (kind, ids, id(layer_moe))
            if key not in seen:
                priced = [layer_costs(lt, ops, "moe" if kind else "dense", "none", x.cp, x.timer, s, layer_moe)
                          for ops in x.settings]
                seen[key] = [(outside_ep(fwd), outside_ep(bwd)) for fwd, bwd in priced]
            out[:, s, int(kind)] = seen[key]
    return out


def outside_ep(cost: Cost) -> float:
    """Exposed seconds of ``cost`` in every dimension but EP (what no overlapped pair hides)."""
    return sum(cost.exposed.values()) - cost.exposed["ep"]


def with_overlap(plan: ResolvedPlan, on: bool) -> ResolvedPlan:
    """``plan`` with TP communication overlap ``on`` (itself when it has it): the same plan otherwise. A copy that
    keeps the plan's derived values (recipe, shapes, rank groups), none of which reads the switch (only the layer
    ops' windows do: :func:`simulator.traffic.layer.tp_ops`); tests/search/test_group_bound.py checks its layer
    ops against the plan resolved with the other value."""
    if plan.parallel.tp_comm_overlap == on:
        return plan
    return plan.model_copy(update={"parallel": plan.parallel.model_copy(update={"tp_comm_overlap": on})})


def chunk_exposure(cache: StepCache, fixed: Fixed, plan: ResolvedPlan, timer: GroupTimer, layer: LayerInputs,
                   moe: MoeInputs | None, overlaps: tuple[bool, ...], dense: np.ndarray
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each TP overlap value of ``overlaps``, per stage and model chunk of ``plan`` (a variant's
    representative), the least exposed seconds of a forward and of a backward of one micro-batch of its members
    with that value (module docstring): each layer's :func:`least_exposed` of its kind, summed over the chunk's
    ``dense`` dense layers and the rest MoE."""
    settings = tuple(layer_traffic(with_overlap(plan, on)) for on in overlaps)
    per_layer = cache.get(least_exposed, fixed, ExposureInputs(timer, layer, moe, plan.parallel.cp,
                                                               plan.parallel.pp, settings))
    moe_layers = np.array(plan.stage_chunks, dtype=float) - dense
    return [(dense * x[:, 0, 0, None] + moe_layers * x[:, 1, 0, None],
             dense * x[:, 0, 1, None] + moe_layers * x[:, 1, 1, None]) for x in per_layer]
