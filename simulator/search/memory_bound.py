"""A lower bound of the device peak of the members of a group by (recompute value, micro-batch, sharding, offload
value), so that the members where it exceeds HBM are skipped before they are resolved (docs/search/
time_to_answer.md, round 8).

A group's members (one outer point) differ in their TP overlap value, offload o, recompute value r, sharding h and
micro-batch b. For a member x = (r, b, h, o) that passes the rules (any TP overlap value: it changes the step time
only, :data:`~simulator.search.space.TIME_ONLY`):

    device_peak(x) >= B(r, b, h, o) = max over s in S of [ F_s(h, o) + A_s(h, r, b, o) + N_s(h, b) ] + runtime,

computed on the group's representative of (b, h) (``Group.plans``: the first member of that micro-batch and
sharding that passes the rules, :func:`~simulator.search.group_bound.group_variants`; where there is none, no
member of (b, h) passes the rules and there is nothing to bound), S its bounding stages
(:func:`~simulator.memory.estimate.bounding_stages`; a maximum over a subset of the stages is at most the maximum
over all). Why each term is the member's, or at most it:

1. The peak. A stage's peak (:attr:`~simulator.memory.items.StageMemory.peak`) is the sum of its items; with
   gradients freed between steps (PyTorch ``grad_set_to_none`` at m = 1) it is that sum less min(activations,
   gradients), or with ``gradient_lifetime: per_layer`` the largest backward phase, of which the first (at the
   loss) holds every item but the gradients (:mod:`simulator.memory.lifetimes`). Every item is >= 0, so the peak
   is at least the stage's weights, main parameters and optimizer states, its gradients unless they are freed,
   and its per-layer activations in flight. The device peak adds the stage's NCCL bytes and the runtime
   (:attr:`~simulator.memory.items.MemoryReport.device_peak_bytes`).
2. The states, F_s (:func:`~simulator.memory.estimate.state_floor_bytes` of stage s with o's GPU shares): they read
   the stage's parameters (the outer point's layout), the recipe (the scenario's precision, optimizer and
   framework, and h: :func:`~simulator.plan.recipe.resolve_recipe` reads nothing else of the plan), the shard
   degrees (dp, cp, Ulysses, ep: outer), whether gradients are freed (the recipe and m, a function of the outer
   point and b) and the share of each bucket o keeps on the GPU (:meth:`~simulator.plan.offload.Offload.gpu_keep`
   of :func:`~simulator.plan.offload.offload_of`, which reads only the offload fields that o and the scenario set:
   :func:`offload_terms`). Not r, the TP overlap or b: the representative's value is the member's.
3. The activations, A_s: the per-layer items of stage s times the micro-batches in flight
   (:func:`~simulator.memory.estimate.estimate_memory`: ``in_flight(pp, vpp, s, m)``, outer values and m), each
   layer's bytes at its recompute mode (r's, or with ``parallel.recompute_layers`` the layer's
   :func:`~simulator.plan.resolved.layer_recompute`) under the member's
   :class:`~simulator.memory.activations.ActContext`: its rank shape (outer and b), r's mode and modules, the
   recipe's choices (h) and the training profile's (the scenario); o only through Megatron's activation offload,
   which leaves out the stage's first N layers: A_s leaves out its N largest layers, at most what x keeps.
4. NCCL's bytes, N_s (:func:`simulator.memory.nccl.nccl_bytes`): a function of the outer point, the stage, the
   gradient reduction and the framework (the recipe: h), and of b for DeepEP's buffer (the search's own cache,
   ``evaluate.stage_nccl``, keys them so); the runtime is a constant.

An offload value that :func:`~simulator.plan.rules.check_memory_switches` (one of the plan rules) rejects with h and
r has no member that passes the rules, so it gets no bound. The members whose B plus ``search.memory_headroom``
exceeds HBM by more than rounding (1e-9 relative: the terms are added in another order than the report's), and
every member of a (recompute value, micro-batch) where each B does, hold no plan that both passes the rules and
fits: they are counted under :data:`MEMORY_BOUND_REASON` and never resolved (each would have been rejected by a
rule or by memory). The search bounds a key when its best-first order first takes a part of it
(:func:`skip_key`). The search's no-fit report keeps the smallest such B
as a lower bound of the smallest peak (``Evaluated.least_oom``, ``exact`` False) where it is below every peak it
saw.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from simulator.errors import UserError
from simulator.memory.activations import cached_layer_bytes
from simulator.memory.estimate import activation_context, bounding_stages, state_floor_bytes
from simulator.model.spec import moe_flags_of
from simulator.plan.config import ParallelPlan
from simulator.plan.offload import offload_of
from simulator.plan.resolved import layer_recompute
from simulator.plan.rules import check_memory_switches
from simulator.search.evaluate import FLOOR_MARGIN, RUNTIME, stage_nccl
from simulator.search.space import OUTER, parallel_of

#: the rejection reason of the members whose device peak bound exceeds HBM (never resolved)
MEMORY_BOUND_REASON = ("memory bound: plans of a group whose device peak is provably above HBM + "
                       "search.memory_headroom (not resolved; each out of memory or rejected by a rule)")

#: the ``parallel:`` fields a member's offload, sharding and recompute value set (:func:`parallel_of`), which
#: :func:`~simulator.plan.offload.offload_of` and :func:`~simulator.plan.rules.check_memory_switches` read
INNER_FIELDS = ("optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d",
                "offload_param", "cpu_offloading_num_layers", "zero", "distributed_optimizer", "recompute",
                "recompute_modules")


def offload_terms(ctx, plan, point: dict[str, Any]) -> list[tuple[str, tuple[float, ...], int]]:
    """Per offload value (its name) of the space that a member of ``point``'s sharding and recompute value can take, the share
    of each state bucket it keeps on the GPU and the layers whose activations it sends to the host (module
    docstring, points 2 and 3). A value is left out where :func:`~simulator.plan.rules.check_memory_switches` (one
    of the plan rules, :func:`~simulator.plan.resolve.batch_free_rules`) rejects it with that sharding and recompute
    value: then no member with the three passes the rules. Each value's fields are the member's
    (:func:`parallel_of`: the scenario's shared keys, then the value's; a field neither sets takes its default) on
    ``plan``'s others; that rule reads of the outer point only pp. Kept per context (it reads the space, the
    training config and those values)."""
    key = ("offload terms", point["pp"], point["recompute"], point["sharding"])
    if (got := ctx.bound_parts.get(key)) is None:
        got = []
        for name in ctx.space.values["offload"]:
            given = parallel_of({**point, "offload": name}, ctx.space)
            member = plan.parallel.model_copy(update={k: given.get(k, ParallelPlan.model_fields[k].default)
                                                      for k in INNER_FIELDS})
            try:
                check_memory_switches(member, plan.training)
            except UserError:
                continue
            off = offload_of(member, plan.training)
            got.append((name, off.gpu_keep(), off.activation_layers))
        ctx.bound_parts[key] = got
    return got


def stage_activations(ctx, plan, value: str, stage: int, drop: int, base=None) -> float:
    """A_s (module docstring, point 3): the per-layer activations in flight of ``stage`` of ``plan`` at recompute
    value ``value`` (``none``, ``full``, ``selective[:modules]``), its ``drop`` largest layers left out; bytes.
    Each layer kind's bytes are kept per context by what they read (the activation context and the kind);
    ``base``: ``plan``'s :func:`~simulator.memory.estimate.activation_context` where the caller has it."""
    p = plan.parallel
    mode = value.partition(":")[0]
    key = ("layer kinds", plan.stage_layers[stage], plan.stage_chunks[stage], mode, p.recompute_layers)
    if (kinds := ctx.bound_parts.get(key)) is None:     # (MoE layer?, recompute mode) -> layers, in first-seen order
        flags = moe_flags_of(plan.model, plan.stage_layers[stage])
        modes = layer_recompute(mode, p.recompute_layers, plan.stage_chunks[stage])
        kinds = ctx.bound_parts[key] = tuple(Counter(zip(flags, modes, strict=True)).items())
    base = activation_context(plan) if base is None else base
    left, total = max(sum(n for _, n in kinds) - drop, 0), 0.0
    for size, n in sorted((_layer_bytes(ctx, plan, base, value, kind), n) for kind, n in kinds):
        total += size * min(n, left)     # the smallest kinds first: the ``drop`` largest layers are left out
        left -= min(n, left)
    return plan.schedule.in_flight(p.pp, p.vpp, stage, plan.num_microbatches) * total


def _layer_bytes(ctx, plan, base, value: str, kind: tuple[bool, str]) -> float:
    """One layer's activation bytes of kind (MoE layer?, recompute mode) under recompute value ``value``: the
    activation context ``base`` (of ``plan``) with the value's mode and modules, as a member of that value has it."""
    key = ("layer bytes", base, value, kind)
    if (got := ctx.bound_parts.get(key)) is None:
        mode, _, modules = value.partition(":")
        given = plan.parallel.model_copy(update={"recompute": mode, "recompute_modules": tuple(modules.split(","))
                                                 if modules else None})
        act = replace(base, recompute=kind[1], recompute_modules=given.recomputed_modules or None)
        got = ctx.bound_parts[key] = cached_layer_bytes(plan.model, act, kind[0])
    return got


def memory_lowers(ctx, group, key: tuple[str, int] | None = None
                  ) -> dict[tuple[str, int], dict[tuple[str, str], float]]:
    """Per (recompute value, micro-batch) of ``group`` that has a representative (only ``key`` where given), and
    per (sharding, offload value) of it that a member passing the rules can take, the lower bound of those members'
    device peak (bytes, without the headroom; module docstring). What several keys share (each representative's
    bounding stages, NCCL bytes and activation context, the states and activations per stage) is kept on the
    group."""
    outer = tuple(group.outer[k] for k in OUTER)
    out: dict[tuple[str, int], dict[tuple[str, str], float]] = {}
    kept = group.memory_parts
    acts = kept.setdefault("acts", {})        # A_s per stage by (micro-batch, residual dtype, value, drop)
    floors = kept.setdefault("floors", {})    # F_s per stage by (sharding, keep, m = 1)
    values = ctx.space.values["recompute"] if key is None else (key[0],)
    for (mb, sharding), plan in group.plans.items():
        if plan.training.mode != "train" or (key is not None and mb != key[1]):
            continue
        if (per_plan := kept.get(id(plan))) is None:
            stages = bounding_stages(plan)
            per_plan = kept[id(plan)] = (stages, stage_nccl(ctx, plan, outer, stages, mb), activation_context(plan))
        stages, nccl, base = per_plan
        for value in values:
            point = {**group.points[0], "recompute": value, "sharding": sharding}
            for name, keep, drop in offload_terms(ctx, plan, point):
                k = (sharding, keep, plan.num_microbatches == 1)
                if (f := floors.get(k)) is None:
                    f = floors[k] = tuple(state_floor_bytes(plan, (s,), keep) for s in stages)
                k = (mb, plan.recipe.amp_casts, value, drop)
                if (a := acts.get(k)) is None:
                    a = acts[k] = tuple(stage_activations(ctx, plan, value, s, drop, base) for s in stages)
                peak = max(map(sum, zip(f, a, nccl, strict=True))) + RUNTIME
                out.setdefault((value, mb), {})[sharding, name] = peak
    return out


def skip_key(ctx, out, group, key: tuple[str, int], members: list[dict[str, Any]]) -> set[int]:
    """Of the members of one (recompute value, micro-batch) ``key`` of ``group`` (``members``: all of them, every TP
    overlap value), those whose :func:`memory_lowers` bound (of their sharding and offload value) plus the headroom
    exceeds HBM, and all of them where each bound of the key does: their ids, counted into ``out`` under
    :data:`MEMORY_BOUND_REASON`, never resolved; the smallest bound left out is a lower bound of the smallest peak
    (``out.least_oom``, not exact). The best-first order (:func:`~simulator.search.best_first.time_best_first`) runs
    it when it first takes a part of that key, so the keys it never reaches are never bounded."""
    gone = _over(ctx, memory_lowers(ctx, group, key))
    if not gone:
        return set()
    left = {id(p) for p in members if (p["recompute"], p["micro_batch"], None, None) in gone
            or (p["recompute"], p["micro_batch"], p["sharding"], p["offload"]) in gone}
    out.rejected[MEMORY_BOUND_REASON] += len(left)
    out.evaluated += len(left)
    _note_least(ctx, out, group, gone, members)
    return left


def _over(ctx, lowers: dict[tuple[str, int], dict[tuple[str, str], float]]) -> dict[tuple, float]:
    """Of :func:`memory_lowers`' bounds, those above HBM with the headroom (beyond rounding) by (value, mb,
    sharding, offload value), and (value, mb, None, None) where every bound of the key is."""
    gone: dict[tuple, float] = {}
    for (value, mb), bounds in lowers.items():
        over = {k: b for k, b in bounds.items() if b * (1 - FLOOR_MARGIN) + ctx.headroom_bytes > ctx.capacity}
        if len(over) == len(bounds):
            gone[value, mb, None, None] = min(over.values())
        gone.update(((value, mb, *k), b) for k, b in over.items())
    return gone


def _note_least(ctx, out, group, gone: dict[tuple, float], members: list[dict[str, Any]]) -> None:
    """Note the smallest bound of ``gone`` (:func:`skip_key`) of ``group`` in ``out.least_oom`` (a lower bound,
    with the first of ``members`` of its (recompute value, micro-batch, sharding, offload value) in the space's
    order)."""
    (value, mb, sharding, offload), peak = min(((k, b) for k, b in gone.items() if k[2] is not None),
                                               key=lambda kb: kb[1])
    if out.least_oom is not None and peak > out.least_oom[0]:
        return
    first = next(p for p in members if (p["recompute"], p["micro_batch"], p["sharding"], p["offload"])
                 == (value, mb, sharding, offload))
    out.note_oom(peak, False, group.plans[mb, sharding], sharding, ctx.space.place(first), value.partition(":")[0])
