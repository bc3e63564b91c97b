"""Time comm ops on the GPUs their rank groups actually occupy.

Rank r runs on ``topology.gpus[r]``; a group of dimension ``dim`` is ``plan.rank_groups(dim)``; it is placed with
:func:`simulator.collectives.place_group` with every other group of the same dimension as ``concurrent_groups``
(they communicate at the same time, so groups whose traffic leaves through the same NIC share it). Placements are
cached by the group's node-relative shape, so a regular plan builds a handful of cost models however many GPUs it
has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.collectives import (
    GroupCostModel,
    all_to_all_matrix_time,
    build_cost_model,
    evaluate,
    place_group,
)
from simulator.plan import ResolvedPlan
from simulator.topology import Topology
from simulator.traffic import CommOp


@dataclass(frozen=True)
class OpTiming:
    """Seconds of one call, the algorithm chosen and the link class the group's traffic crosses."""

    call_s: float
    algorithm: str
    link: str


def ep_dispatch_combine_time(model: GroupCostModel, bytes_per_rank: float) -> float:
    """Seconds of one MoE dispatch (or combine) all-to-all where every rank sends ``bytes_per_rank`` of routed
    token copies spread uniformly over the EP group (the share addressed to itself stays local).

    The uniform-routing placeholder, kept for callers of :meth:`GroupTimer.time` on EP ops: :func:`simulate_step`
    times MoE layers with ``simulator.moe`` (:mod:`simulator.schedule.moe_hook`) instead.
    """
    n = model.placement.n_ranks
    if n == 1:
        return 0.0
    matrix = np.full((n, n), bytes_per_rank / n)
    np.fill_diagonal(matrix, 0.0)
    seconds = all_to_all_matrix_time(model, matrix)
    if not np.isfinite(seconds):
        # all_to_all_matrix_time reads the latency of an infeasible table row on single-node groups (reported to
        # the collectives owner); the uniform matrix equals the collective all_to_all of the same bytes
        seconds = float(evaluate(model, "all_to_all", np.array([bytes_per_rank])).times_s[0])
    return seconds


class GroupTimer:
    """Build-once cache of placements and cost models for one (plan, topology); ``time(op, stage)``."""

    def __init__(self, plan: ResolvedPlan, topology: Topology, calibration=None) -> None:
        self.plan, self.topology, self.calibration = plan, topology, calibration
        if plan.world_size > len(topology.gpus):
            raise ValueError(f"plan needs {plan.world_size} GPUs, topology has {len(topology.gpus)}")
        self._groups: dict[str, tuple[tuple[int, ...], ...]] = {}
        self._of_rank: dict[str, dict[int, int]] = {}
        self._models: dict[tuple, GroupCostModel] = {}
        self._times: dict[tuple, OpTiming] = {}
        self._nodes = [topology.node_of(g) for g in topology.gpus]
        self._local = [int(g.split("gpu")[1]) for g in topology.gpus]
        pp = plan.rank_groups("pp")
        self.stage_rank = pp[0]  # rank 0's pipeline: one representative rank per stage

    # ---- groups ---------------------------------------------------------------------------------------------
    def groups(self, kind: str) -> tuple[tuple[int, ...], ...]:
        """All groups of ``kind`` (rank_groups names, ``pp_pair:<stage>`` boundaries, ``embedding``)."""
        if kind not in self._groups:
            if kind.startswith("pp_pair:") or kind == "embedding":
                a = int(kind.split(":")[1]) if kind != "embedding" else 0
                b = a + 1 if kind != "embedding" else self.plan.parallel.pp - 1
                self._groups[kind] = tuple((g[a], g[b]) for g in self.plan.rank_groups("pp"))
            else:
                self._groups[kind] = self.plan.rank_groups(kind)
            self._of_rank[kind] = {r: i for i, g in enumerate(self._groups[kind]) for r in g}
        return self._groups[kind]

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        groups = self.groups(kind)
        return groups[self._of_rank[kind][rank]]

    def _shape(self, group: tuple[int, ...]) -> tuple:
        base = min(self._nodes[r] for r in group)
        return tuple(sorted((self._nodes[r] - base, self._local[r]) for r in group))

    def model(self, kind: str, stage: int) -> GroupCostModel:
        """Cost model of the ``kind`` group holding stage ``stage``'s representative rank."""
        rank = self.stage_rank[stage]
        if kind == "pp_pair":
            kind = f"pp_pair:{stage}"
        group = self.group_of(kind, rank)
        key = (kind.split(":")[0], self._shape(group))
        if key not in self._models:
            gpus = [self.topology.gpus[r] for r in group]
            others = [[self.topology.gpus[r] for r in g] for g in self.groups(kind) if g != group]
            placement = place_group(self.topology, gpus, concurrent_groups=others)
            self._models[key] = build_cost_model(placement, calibration=self.calibration)
        return self._models[key]

    def link(self, model: GroupCostModel) -> str:
        p = model.placement
        if p.n_ranks == 1:
            return "none"
        if p.n_nodes > 1:
            nics = self.topology.cluster.node.nics
            return nics.kind if nics is not None else "network"
        return p.intra_transport

    def time(self, op: CommOp, stage: int) -> OpTiming:
        """One call of ``op`` on the group of stage ``stage``."""
        model = self.model(op.group, stage)
        key = (id(model), op.op, op.bytes, op.dim)
        if key not in self._times:
            if model.placement.n_ranks == 1 or op.bytes <= 0:
                timing = OpTiming(0.0, "none", "none")
            elif op.dim == "ep":
                timing = OpTiming(ep_dispatch_combine_time(model, op.bytes), "uniform_a2a", self.link(model))
            else:
                ev = evaluate(model, op.op, np.array([op.bytes]))
                timing = OpTiming(float(ev.times_s[0]), f"{ev.algorithms[0]}/{ev.protocols[0]}", self.link(model))
            self._times[key] = timing
        return self._times[key]
