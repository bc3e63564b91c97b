"""The step's caches are keyed by exactly what their functions read (simulator/schedule/cache.py).

For every field of every frozen argument object of the step's cached functions, a changed value (another valid
one) is recomputed: in a cache warmed with hypothesis-drawn sequences of original and changed arguments, each
result equals a fresh computation (a new :class:`StepCache` and new comm timers), so no entry is ever returned
for arguments it was not computed from; equal arguments hit (the very object). A table lists the changed values
per field and fails when a frozen argument object gains a field it does not cover. Plans of a search sharing one
cache give exactly the step of each plan prepared alone.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.implementation.profiles import profile_named
from simulator.memory import estimate, nccl
from simulator.plan import ranks
from simulator.pricing.groups import GroupTimer
from simulator.pricing.host import host_issue_costs
from simulator.pricing.moe_layer import MoeLayerTiming
from simulator.schedule import fast_timeline
from simulator.schedule.cache import StepCache
from simulator.schedule.chunks import (
    ChunkInputs,
    CostInputs,
    EmbeddingInputs,
    HeadInputs,
    _embedding,
    _head,
    chunk_bases,
    chunk_costs,
    chunk_inputs,
    middle_signatures,
)
from simulator.schedule.inputs import (
    DpInputs,
    MoeInputs,
    build_inputs,
    dp_traffic,
    layer_times,
    moe_timings,
)
from simulator.schedule.step import finish_step, prepare_step, replay_timelines
from simulator.schedule.tails import P2pInputs, _p2p
from simulator.search.caches import clear_process_caches
from simulator.search.evaluate import resolve
from simulator.search.run import candidates, search_context

#: the eager MoE host floor of the megatron profile (measured on the H200)
MEGATRON_HOST = host_issue_costs(profile_named("megatron"))

MOE = {"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "mixtral-8x7b"},
       "training": {"seq_len": 4096, "global_batch": 64},
       "search": {"micro_batch": [1, 2], "vpp": [1, 2], "tp": [1, 2], "pp": [1, 2, 4], "ep": [1, 2]}}
BASE = {"gpus": 16, "schedule": "1f1b", "pp": 4, "vpp": 1, "tp": 1, "cp": 1, "ep": 2, "sp": True, "recompute": "selective",
        "sharding": "zero3", "micro_batch": 1}


@cache
def _world():
    """The search context, the base plan's step inputs and those of two neighbours: another rank layout with the
    same pipeline depth (tp 2) and the same layout with another micro-batch (another MoE token count)."""
    ctx = search_context(MOE)
    plans = [resolve(ctx, {**BASE, **change}) for change in ({}, {"tp": 2}, {"micro_batch": 2})]
    step_cache = StepCache()
    inputs = [build_inputs(ctx.fixed.model, p, ctx.topology, ctx.calibration, None, ctx.fixed.moe, step_cache)
              for p in plans]
    return ctx, plans, inputs


def _fields(x) -> tuple[str, ...]:
    """The field names of a frozen argument object (a NamedTuple or a frozen dataclass)."""
    return x._fields if hasattr(x, "_fields") else tuple(f.name for f in dataclasses.fields(x))


def _replace(x, **changes):
    return x._replace(**changes) if hasattr(x, "_fields") else dataclasses.replace(x, **changes)


def _fresh_timer(t: GroupTimer) -> GroupTimer:
    return GroupTimer(t.plan, t.topology, t.calibration, t.moe_settings)


def _fresh(x):
    """``x`` with every comm timer in it replaced by a new one of the same plan (its own placements and times)."""
    if isinstance(x, GroupTimer):
        return _fresh_timer(x)
    if isinstance(x, (ChunkInputs, CostInputs, MoeInputs, P2pInputs)):
        return _replace(x, **{name: _fresh(getattr(x, name)) for name in _fields(x)})
    return x


def _canon(x):
    """A comparable form of a result (a MoE layer holds arrays: its layer time and summary stand for it)."""
    if isinstance(x, MoeLayerTiming):
        return ("moe", x.layer, tuple(sorted(x.summary().items())))
    if isinstance(x, (list, tuple)):
        return tuple(_canon(v) for v in x)
    return x


def _base_args():
    """(function, its original frozen argument, the alternatives per field) for every cached function."""
    ctx, plans, (a, b, c) = _world()
    sig = middle_signatures(a)
    ci = chunk_inputs(a, sig)
    ops = tuple(o for o in a.traffic.stages[1] if o.scope == "microbatch")
    assert ops, "the base plan must run per-micro-batch DP ops (ZeRO-3)"
    li = a.layer
    layer_alts = {
        "shape": [b.layer.shape, c.layer.shape], "dtype": ["fp8"], "attention": ["sdpa", "unfused"],
        "eager": [not li.eager], "amp_casts": [not li.amp_casts], "fp8_cast_bytes": [(li.fp8_cast_bytes[0] + 2.0, 1.0)],
        "grad_accum_bytes": [li.grad_accum_bytes + 4.0], "fsdp_copy_bytes": [(2.0, 4.0)],
        "host": [None if li.host else MEGATRON_HOST], "permute": ["index_select", "gather_scatter"],
        "sequential_experts": [not li.sequential_experts], "sort_chunks": [not li.sort_chunks]}
    moe = ci.moe
    moe_alts = {"timer": [c.timer], "layer": [_replace(li, attention="sdpa")], "etp": [2], "pp": [2]}
    chunk_alts = {
        "timer": [b.timer, c.timer], "layer": [_replace(li, attention="sdpa"), c.layer],
        "moe": [None, _replace(moe, timer=c.timer)], "pp": [2, 3], "vpp": [2], "cp": [2],
        "stage_layers": [ci.stage_layers[::-1]], "stage_chunks": [tuple((n - 1, 1) for (n,) in ci.stage_chunks)],
        "recompute": ["full", "none"], "recompute_layers": [1, 2],
        "recomputed_modules": [frozenset({"core_attn", "mlp"}), frozenset()],  # (the plan's: core_attn)
        "last_stage_rank": [0], "train": [not ci.train], "cross_entropy": ["unfused", "pytorch"],
        "layer_ops": [ci.layer_ops[:-1], tuple(_replace(o, bytes=o.bytes * 2) for o in ci.layer_ops)],
        "pipeline_ops": [(), b.traffic.pipeline],
        "signatures": [v for v in ((None, 0, 0, None), (None, 0, 1, None), (None,) * 4) if v != ci.signatures]}
    ki = CostInputs(ci, tuple(tuple(o for o in s if o.scope == "microbatch") for s in a.traffic.stages), 1.03)
    cost_alts = {"bases": [_replace(ci, cp=2), _replace(ci, timer=c.timer)],
                 "dp_ops": [((),) * 4, tuple(tuple(_replace(o, bytes=o.bytes * 2) for o in s)
                                             for s in ki.dp_ops)],
                 "slowest": [1.0, 1.2]}
    ei = EmbeddingInputs(li.shape, li.grad_accum_bytes, li.fsdp_copy_bytes)
    emb_alts = {"shape": [b.layer.shape, c.layer.shape], "grad_accum_bytes": [4.0], "fsdp_copy_bytes": [(2.0, 4.0)]}
    hi = HeadInputs(li.shape, li.dtype, li.grad_accum_bytes, False, "fused", li.fsdp_copy_bytes)
    head_alts = {"shape": [c.layer.shape], "dtype": ["fp8"], "grad_accum_bytes": [4.0], "copy": [True],
                 "cross_entropy": ["unfused", "pytorch"], "fsdp_copy_bytes": [(2.0, 4.0)]}
    pi = P2pInputs(a.timer, a.traffic.pipeline[0], 4)
    p2p_alts = {"timer": [b.timer, c.timer], "op": [_replace(pi.op, bytes=pi.op.bytes * 3)], "pp": [2, 3]}
    return [(layer_times, li, layer_alts), (moe_timings, moe, moe_alts), (chunk_bases, ci, chunk_alts),
            (chunk_costs, ki, cost_alts), (_embedding, ei, emb_alts), (_head, hi, head_alts), (_p2p, pi, p2p_alts)]


@cache
def _cases():
    """Every (function, argument) pair: the originals and each one-field change."""
    out = []
    for fn, arg, alts in _base_args():
        out.append((fn, arg))
        for name, values in alts.items():
            out += [(fn, _replace(arg, **{name: v})) for v in values]
    return out


@cache
def _fresh_result(i: int):
    fn, arg = _cases()[i]
    ctx, _, (a, _, _) = _world()
    return _canon(StepCache().get(fn, a.fixed, _fresh(arg)))


def test_every_field_of_every_frozen_argument_has_a_changed_value():
    for _, arg, alts in _base_args():
        names = set(_fields(arg))
        assert set(alts) == names, f"{type(arg).__name__}: changed values for {sorted(names - set(alts))} missing"
        for name, values in alts.items():
            assert all(v != getattr(arg, name) for v in values), f"{type(arg).__name__}.{name}: not a change"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.lists(st.integers(0, 10**6), min_size=1, max_size=60))
def test_a_changed_field_is_recomputed_and_equal_arguments_hit(order):
    ctx, _, (a, _, _) = _world()
    cases, shared = _cases(), StepCache()
    fixed = shared.fixed(a.fixed.model, a.fixed.gpu, a.fixed.eff, a.fixed.topology, a.fixed.calibration,
                         a.fixed.moe)
    for k in order:
        i = k % len(cases)
        fn, arg = cases[i]
        got = shared.get(fn, fixed, arg)
        assert _canon(got) == _fresh_result(i), f"{fn.__name__}: a stale entry for {arg!r}"
        assert shared.get(fn, fixed, _replace(arg)) is got      # an equal argument hits


def test_stage_traffic_is_shared_only_by_plans_that_agree_on_what_it_reads():
    """:class:`DpInputs` keeps the plan it came from out of its key: plans equal in its fields (here: two
    micro-batches) have equal stage traffic, and plans that differ in any of its fields have different keys."""
    _, plans, (a, b, c) = _world()
    keys = [DpInputs(p.parallel, p.world_size, p.recipe, p.stage_layers, p) for p in plans]
    assert keys[0] == keys[2] and keys[0] != keys[1]
    fresh = [dp_traffic(StepCache(), a.fixed, k) for k in keys]
    assert fresh[0] == fresh[2]
    for name in ("parallel", "world_size", "recipe", "stage_layers"):
        assert _replace(keys[0], **{name: getattr(keys[1], name)}) != keys[0] or \
            getattr(keys[0], name) == getattr(keys[1], name)


def test_clear_empties_the_cache():
    ctx, _, (a, _, _) = _world()
    fn, arg = _cases()[0]
    shared = StepCache()
    fixed = shared.fixed(a.fixed.model, a.fixed.gpu, a.fixed.eff, a.fixed.topology, a.fixed.calibration,
                         a.fixed.moe)
    first = shared.get(fn, fixed, arg)
    shared.clear()
    fixed = shared.fixed(a.fixed.model, a.fixed.gpu, a.fixed.eff, a.fixed.topology, a.fixed.calibration,
                         a.fixed.moe)
    again = shared.get(fn, fixed, arg)
    assert again is not first and _canon(again) == _canon(first)


def _step(parts):
    r = finish_step(parts, replay_timelines(parts))
    return (r.step_s, r.compute_s, r.recompute_s, r.bubble_s, r.host_s, r.optimizer_s, tuple(r.exposed_comm_s.items()),
            r.hardware_flops_per_gpu, r.stage_end_s, r.stage_busy_s, r.p2p_s, r.comm, r.chunk_comm_s)


def test_plans_sharing_one_cache_give_exactly_each_plan_alone():
    """Three dozen plans of the search space (every sharding and micro-batch of a dozen layouts and depths, so
    that they share chunk bases, layout times and stage traffic) prepared with one shared cache, in two orders,
    equal to the last bit each plan prepared with its own."""
    ctx = search_context(MOE)
    points, _ = candidates(ctx, 10**6)
    plans = []
    for p in points:
        if p["ep"] > 1 or p["pp"] > 1:
            try:
                plans.append(resolve(ctx, p))
            except UserError:
                continue
    plans = plans[::max(1, len(plans) // 36)][:36]
    assert len(plans) >= 30
    kw = {"calibration": ctx.calibration, "moe": ctx.fixed.moe}
    alone = [_step(prepare_step(ctx.fixed.model, p, ctx.topology, **kw)) for p in plans]
    for order in (plans, plans[::-1]):
        shared = StepCache()
        together = {id(p): _step(prepare_step(ctx.fixed.model, p, ctx.topology, cache=shared, **kw)) for p in order}
        assert [together[id(p)] for p in plans] == alone


def test_clear_process_caches_empties_what_a_search_fills():
    """The benchmark's cold start: after a search, :func:`clear_process_caches` leaves its caches empty."""
    from simulator.memory import estimate_memory

    ctx = search_context(MOE)
    plan = resolve(ctx, BASE)
    prepare_step(ctx.fixed.model, plan, ctx.topology, calibration=ctx.calibration, moe=ctx.fixed.moe)
    estimate_memory(plan, cluster=ctx.fixed.cluster)      # a search prices memory too (the NCCL communicators)
    assert ranks._grid_groups.cache_info().currsize > 0 and nccl._communicator_bytes.cache_info().currsize > 0
    clear_process_caches()
    assert ranks._grid_groups.cache_info().currsize == 0 and fast_timeline._graph.cache_info().currsize == 0
    assert nccl._communicator_bytes.cache_info().currsize == 0
    assert not estimate._scaled_by_identity._entries and not nccl._fabric._entries
