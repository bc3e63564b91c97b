"""The stage tails and the comm table of a step (step 4 of :mod:`simulator.schedule.step`): each stage's exposed
DP gradient reduction, tied-embedding sync, optimizer step and eager parameter all-gather after its last
backward; the slowest pipeline boundary's sendrecv; the calls per step of every op of a stage.
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.compute.optimizer import optimizer_time
from simulator.pricing.groups import GroupTimer
from simulator.pricing.offload import (
    OffloadTimes,
    activation_offload_s,
    host_rates,
    optimizer_offload,
    param_fetch_s,
)
from simulator.pricing.overlap import coefficients, exposed, exposed_bucketed
from simulator.schedule.cache import Fixed, StepCache
from simulator.schedule.costs import Cost, dp_window
from simulator.schedule.inputs import StepInputs
from simulator.schedule.result import CommRow, TraceEvent
from simulator.traffic import DIMS, CommOp
from simulator.traffic.step import RECEIVE


def p2p_s(ctx: StepInputs) -> float:
    """One boundary sendrecv (the slowest boundary of the pipeline)."""
    if not ctx.traffic.pipeline:
        return 0.0
    op = ctx.traffic.pipeline[0]
    return ctx.cache.get(_p2p, ctx.fixed, P2pInputs(ctx.timer, op, ctx.plan.parallel.pp))


class P2pInputs(NamedTuple):
    """What :func:`_p2p` reads: the plan's comm timer, the boundary op and the pipeline depth."""

    timer: GroupTimer
    op: CommOp
    pp: int


def _p2p(cache: StepCache, fixed: Fixed, a: P2pInputs) -> float:
    """The slowest boundary's time of one call of ``a.op``."""
    return max(a.timer.time(a.op, s).call_s for s in range(a.pp - 1))


def stage_tail(ctx: StepInputs, stage: int, chunks: list[tuple[Cost, Cost]], start_s: float, slowest: float,
          trace: bool = True) -> tuple[dict[str, float], float, list[TraceEvent]]:
    """Exposed per-step comm (by dim) and optimizer seconds after the stage's last backward, with trace bars
    (none when ``trace`` is False: plan search)."""
    plan = ctx.plan
    ops = [o for o in ctx.traffic.stages[stage] if o.scope == "step"]
    params = ctx.traffic.params[stage]
    bwd = [b for _, b in chunks]
    fwd = [f for f, _ in chunks]
    bucket = coefficients()["grad_bucket_elements"] / max(params.dense + params.expert, 1.0)
    out = dict.fromkeys(DIMS, 0.0)
    events, t = [], start_s
    gathers = []
    for op in ops:
        timing = ctx.timer.time(op, stage)
        call = timing.call_s
        if op.op == "all_gather":
            gathers.append((op, call, timing))
            continue
        window = sum(dp_window(b, timing.on_network) for b in bwd)
        ex = exposed_bucketed(call, window, bucket, timing.interference) if op.overlap == "backward" else call
        out[op.dim] += ex
        if trace:
            events.append(TraceEvent(stage, f"{op.dim} comm", op.name, t, ex))
        t += ex
    r = plan.recipe
    owned = (params.dense / plan.dense_shard_degree + params.expert / plan.expert_shard_degree if r.stage >= 1
             else params.dense + params.expert)
    eff, fraction = ctx.eff, plan.training.profile.optimizer.bandwidth_fraction
    if fraction is not None and eff.optimizer_efficiency is None:   # the implementation's measured rate
        eff = eff.model_copy(update={"optimizer_efficiency": fraction})
    off = plan.offload       # the offloaded share is stepped on the CPU (simulator.pricing.offload)
    opt = optimizer_time(owned * (1.0 - off.optimizer_fraction), params.dense + params.expert,
                         r.optimizer_update_bytes, r.grad, ctx.gpu, eff) * slowest
    if off.any:
        times = stage_offload(ctx, stage, owned, sum(f.total for f in fwd), sum(b.total for b in bwd))
        opt += times.cpu_s
        out["offload"] = times.copy_s
        if trace:
            events.append(TraceEvent(stage, "host", "offload copies (exposed)", t, times.copy_s))
        t += times.copy_s
    if trace:
        events.append(TraceEvent(stage, "compute", "optimizer step", t, opt))
    t += opt
    for op, call, timing in gathers:
        window = sum(dp_window(f, timing.on_network, backward=False) for f in fwd)
        ex = exposed(call - call * min(1.0, bucket), window, timing.interference) + call * min(1.0, bucket) \
            if op.overlap == "forward" else call
        out[op.dim] += ex
        if trace:
            events.append(TraceEvent(stage, f"{op.dim} comm", op.name, t, ex))
        t += ex
    return out, opt, events


def stage_offload(ctx: StepInputs, stage: int, owned: float, forward_s: float, backward_s: float) -> OffloadTimes:
    """What the plan's offload (:attr:`ResolvedPlan.offload`) adds to ``stage``'s step: the CPU optimizer step and
    the exposed host-link copies of the optimizer, parameter and activation offload (:mod:`simulator.pricing.offload`),
    against one micro-batch's ``forward_s`` / ``backward_s`` of the stage's chunks."""
    plan, off = ctx.plan, ctx.plan.offload
    rates = host_rates(ctx.timer.topology, plan.world_size)
    m = plan.num_microbatches
    opt = optimizer_offload(owned, off, plan.recipe, rates, m, backward_s)
    fetch = param_fetch_s(owned, off, plan.recipe, rates, m, forward_s, backward_s)
    act = activation_offload_s(ctx.offload_activation_bytes / max(off.activation_layers, 1),
                               len(plan.stage_layers[stage]), off.activation_layers, rates, m, forward_s, backward_s)
    return OffloadTimes(opt.cpu_s, opt.copy_s + fetch + act)


def comm_rows(ctx: StepInputs, stage: int) -> tuple[CommRow, ...]:
    """The comm table of one stage: calls per step of every op."""
    plan, p, m = ctx.plan, ctx.plan.parallel, ctx.plan.num_microbatches
    kinds = [ctx.model.is_moe_layer(i) for i in plan.stage_layers[stage]]
    rows = []
    recomputed = [mode != "none" for mode in plan.layer_recompute(stage)]
    for op in ctx.traffic.layer:
        n_layers = sum(1 for k, r in zip(kinds, recomputed, strict=True)
                       if (op.layer == "any" or (op.layer == "moe") == k) and (r or op.scope != "layer_recompute"))
        rows.append((op, op.count * n_layers * m))
    rows += [(op, plan.schedule.boundary_calls(stage, p.pp, p.vpp, m, ("gradient" in op.name)
                                               != op.name.endswith(RECEIVE)))   # a receive: the other side's count
             for op in ctx.traffic.pipeline]
    rows += [(op, m if op.scope == "microbatch" else 1) for op in ctx.traffic.stages[stage]]
    out = []
    for op, count in rows:
        if count == 0:
            continue
        label = f"{op.name} (recompute)" if op.scope == "layer_recompute" else op.name
        timing = ctx.timer.time(op, min(stage, p.pp - 2) if op.scope == "boundary" else stage)
        out.append(CommRow(op.dim, op.op, label, op.bytes if timing.bytes is None else timing.bytes, int(count),
                           timing.algorithm, timing.link, timing.call_s))
    return tuple(out)
