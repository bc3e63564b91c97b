"""Per-micro-batch cost of each model chunk on each stage: compute, recompute and exposed comm per dimension.

A :class:`Cost` splits a forward or backward of one chunk into ``compute`` (model work), ``recompute`` (what the
recompute mode re-runs) and ``exposed`` communication by CONTRACT.md dimension, so the step breakdown is a sum of
these over the critical stage's timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.compute.layer import LayerTime
from simulator.schedule.groups import GroupTimer
from simulator.schedule.moe_hook import MoeLayerTiming
from simulator.schedule.overlap import exposed
from simulator.traffic import DIMS, CommOp


@dataclass
class Cost:
    """Seconds of one forward or backward of a chunk, by part; ``comm`` is the busy time per dim (for traces)."""

    compute: float = 0.0
    recompute: float = 0.0
    exposed: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMS, 0.0))
    comm: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMS, 0.0))
    flops: float = 0.0

    @property
    def total(self) -> float:
        return self.compute + self.recompute + sum(self.exposed.values())

    def add(self, other: Cost, times: float = 1.0) -> None:
        self.compute += other.compute * times
        self.recompute += other.recompute * times
        self.flops += other.flops * times
        for d in DIMS:
            self.exposed[d] += other.exposed[d] * times
            self.comm[d] += other.comm[d] * times


def _windows(lt: LayerTime, cp: int, phase: str) -> dict[str, float]:
    """Compute each overlap kind may hide behind, for one layer (per call for the CP ring steps)."""
    if phase == "bwd":
        return {"wgrad": lt.wgrad_s, "dgrad": lt.dgrad_s, "attention_bwd": lt.attn_bwd_s / cp, "none": 0.0}
    return {"gemm": lt.fwd_gemm_s, "attention_fwd": lt.attn_fwd_s / cp, "none": 0.0}


def _comm_cost(ops: list[CommOp], timer: GroupTimer, stage: int, windows: dict[str, float], cost: Cost) -> None:
    """Add the exposed and busy time of ``ops`` (one layer, one phase) into ``cost``; ops sharing an overlap
    window share it (their times add before the window is subtracted)."""
    by_window: dict[str, dict[str, float]] = {}
    for op in ops:
        t = timer.time(op, stage).call_s
        cost.comm[op.dim] += t * op.count
        if op.overlap.startswith("attention"):      # CP ring: each step hides behind one attention block
            cost.exposed[op.dim] += op.count * exposed(t, windows[op.overlap])
        elif op.overlap == "none" or op.overlap not in windows:
            cost.exposed[op.dim] += t * op.count
        else:
            by_window.setdefault(op.overlap, {}).setdefault(op.dim, 0.0)
            by_window[op.overlap][op.dim] += t * op.count
    for window, per_dim in by_window.items():
        total = sum(per_dim.values())
        for dim, t in per_dim.items():
            cost.exposed[dim] += exposed(total, windows[window]) * t / total


def layer_costs(lt: LayerTime, ops: tuple[CommOp, ...], kind: str, recompute: str, cp: int, timer: GroupTimer,
                stage: int, moe: MoeLayerTiming | None = None) -> tuple[Cost, Cost]:
    """(forward, backward) cost of one layer of ``kind`` (dense/moe) for one micro-batch on ``stage``.

    ``moe``: the MoE package's timing of this layer (:mod:`simulator.schedule.moe_hook`); it replaces ``lt`` and
    times the EP ops (dispatch/combine with the backend's overlap) instead of the collectives all-to-all."""
    mine = [o for o in ops if o.layer in ("any", kind)]
    if moe is not None:
        lt = moe.layer
        ep_recompute = any(o.dim == "ep" and o.scope == "layer_recompute" for o in mine)
        mine = [o for o in mine if o.dim != "ep"]
    fwd = Cost(compute=lt.fwd_s, flops=lt.fwd_flops)
    _comm_cost([o for o in mine if o.scope == "layer_fwd"], timer, stage, _windows(lt, cp, "fwd"), fwd)
    bwd = Cost(compute=lt.bwd_s, recompute=lt.recompute_s(recompute),
               flops=lt.bwd_flops + lt.recompute_flops(recompute))
    _comm_cost([o for o in mine if o.scope == "layer_bwd"], timer, stage, _windows(lt, cp, "bwd"), bwd)
    _comm_cost([o for o in mine if o.scope == "layer_recompute"], timer, stage, _windows(lt, cp, "fwd"), bwd)
    if moe is not None:
        _moe_cost(moe, fwd, bwd, ep_recompute)
    return fwd, bwd


def _moe_cost(moe: MoeLayerTiming, fwd: Cost, bwd: Cost, recompute: bool) -> None:
    """EP exposed and busy time of one MoE layer; full recompute repeats the forward dispatch and combine."""
    fwd.exposed["ep"] += moe.fwd_exposed_s
    fwd.comm["ep"] += moe.fwd_comm_s
    bwd.exposed["ep"] += moe.bwd_exposed_s + (moe.fwd_exposed_s if recompute else 0.0)
    bwd.comm["ep"] += moe.bwd_comm_s + (moe.fwd_comm_s if recompute else 0.0)


def microbatch_dp_cost(ops: tuple[CommOp, ...], timer: GroupTimer, stage: int, share: float, fwd: Cost,
                       bwd: Cost) -> None:
    """ZeRO-2/3 per-micro-batch gathers and reductions of a chunk (``share`` of the stage's parameters),
    overlapped with that chunk's forward or backward compute (FSDP prefetch)."""
    for phase, cost in (("forward", fwd), ("backward", bwd)):
        mine = [o for o in ops if o.scope == "microbatch" and (o.overlap == phase or
                                                                (phase == "backward" and o.overlap == "none"))]
        if not mine:
            continue
        hidden = [timer.time(o, stage).call_s * share for o in mine if o.overlap != "none"]
        plain = [timer.time(o, stage).call_s * share for o in mine if o.overlap == "none"]
        cost.comm["dp"] += sum(hidden) + sum(plain)
        cost.exposed["dp"] += exposed(sum(hidden), cost.compute + cost.recompute) + sum(plain)
