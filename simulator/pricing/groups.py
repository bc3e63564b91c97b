"""Time comm ops on the GPUs their rank groups actually occupy.

Rank r runs on ``topology.gpus[r]``; a group of dimension ``dim`` is ``plan.rank_groups(dim)``; it is placed with
:func:`simulator.collectives.place_group` with every other group of the same dimension as ``concurrent_groups``
(they communicate at the same time, so groups whose traffic leaves through the same NIC share it). Placements are
cached by the group's node-relative shape, so a regular plan builds a handful of cost models however many GPUs it
has. Every op goes through :meth:`GroupTimer.time`: the collectives of TP/CP/Ulysses/PP/DP with the collectives
cost model, the MoE dispatch and combine of EP with the MoE backend model (:func:`simulator.moe.moe_layer_comm`:
routing skew, DeepEP / NCCL / CPU proxy, IBGDA), on the same placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from simulator.collectives import GroupCostModel, build_cost_model, evaluate, place_group
from simulator.errors import UserError
from simulator.moe import (
    DEFAULT_MOE_SETTINGS,
    MoeLayerComm,
    MoeSettings,
    Routing,
    comm_settings,
    layer_routing,
    moe_layer_comm,
)
from simulator.plan import Batch, ResolvedPlan
from simulator.pricing.overlap import network_interference
from simulator.topology import Topology
from simulator.traffic import CommOp

#: link classes inside an NVLink domain (:meth:`GroupTimer.link`; MoE kernels report ``nvlink`` or ``rdma``)
INTRA_LINKS = frozenset({"none", "nvlink", "pcie_p2p", "shm"})


@dataclass(frozen=True)
class OpTiming:
    """Seconds of one call, the algorithm chosen, the link class the group's traffic crosses, the bytes the
    comm table reports (``None``: the op's own bytes; MoE kernels report what crosses the bottleneck link) and the
    interference of the call's hidden time on compute (``None``: the engine's NVLink-fitted default;
    :func:`simulator.pricing.overlap.network_interference` when the group spans nodes)."""

    call_s: float
    algorithm: str
    link: str
    bytes: float | None = None
    interference: float | None = None

    @property
    def on_network(self) -> bool:
        """Whether the call's traffic leaves the NVLink domain (through the NICs: ``ib``, ``roce``, ``efa``, MoE
        kernels' ``rdma``), not only NVLink, PCIe or host memory inside it."""
        return self.link not in INTRA_LINKS


#: which MoE kernel prices each EP op of the traffic list: (direction, route); the gradient of combine runs the
#: dispatch route and the gradient of dispatch the combine route (simulator.moe.MoeLayerComm)
EP_KERNELS = {"dispatch": ("forward", "dispatch"), "combine": ("forward", "combine"),
              "combine gradient": ("backward", "dispatch"), "dispatch gradient": ("backward", "combine")}

#: UserError key paths of simulator.moe -> the scenario key that sets them
_MOE_KEYS = {"topk_groups": "moe.node_limit", "zipf_exponent": "moe.zipf_exponent", "qps": "moe.qps",
             "transport": "moe.transport", "distribution": "moe.distribution", "dispatch_dtype": "moe.dispatch_dtype",
             "reserved_sms": "moe.backend", "capacity_factor": "model.moe.capacity_factor", "experts": "parallel.ep",
             "ep": "parallel.ep", "top_k": "model.moe.top_k", "redundant_experts": "parallel.redundant_experts"}


class LayoutTimes:
    """What every plan of one rank layout on one topology (with one calibration and one set of MoE settings) shares:
    each group kind's groups and rank-to-group table, each group's value key and its small integer, the group
    cost models (placements) and the op times, all filled lazily by :class:`GroupTimer`. The rank layout
    (``ResolvedPlan.rank_layout``: rank order and grid sizes) with the topology fixes every group and its
    placement, so these are pure functions of the layout; a plan search keeps one per layout
    (:class:`simulator.schedule.cache.StepCache`) and hands it to the timer of each plan of that layout."""

    def __init__(self, layout: tuple, topology: Topology, calibration=None, moe: MoeSettings | None = None) -> None:
        self.layout, self.topology, self.calibration = layout, topology, calibration
        self.moe_settings = moe or DEFAULT_MOE_SETTINGS
        self.groups: dict[str, tuple[tuple[tuple[int, ...], ...], dict[int, int]]] = {}   # by group kind
        self.keys: dict[tuple[str, int], tuple] = {}           # by (group kind, stage)
        self.key_ids: dict[tuple[str, int], int] = {}          # by (group kind, stage)
        self.ids: dict[tuple, int] = {}                        # by group key
        self.key_tables: dict[tuple[tuple[str, ...], int], tuple] = {}   # by (group kinds, pp)
        self.models: dict[tuple, GroupCostModel] = {}          # by group key
        self.times: dict[OpCall, OpTiming] = {}                # by the call
        per_domain = topology.cluster.domain_gpus  # NVLink domains repeat: a group's shape within them is its key
        self.nodes = [r // per_domain for r in range(len(topology.gpus))]
        self.local = [r % per_domain for r in range(len(topology.gpus))]

    def serves(self, plan: ResolvedPlan, topology: Topology, calibration, moe: MoeSettings) -> bool:
        """Whether a timer of ``plan`` on ``topology`` may read these tables."""
        return (topology is self.topology and calibration is self.calibration and moe == self.moe_settings
                and plan.rank_layout == self.layout)


class EpInputs(NamedTuple):
    """What the MoE dispatch and combine of a plan read besides its EP group's placement and the ``moe:`` settings
    (:meth:`GroupTimer.moe_comm`): the model, the rank's router tokens (rounded), the dispatch dtype and the plan's
    MoE backend (``ResolvedPlan.moe_backend``)."""

    model: object
    tokens: int
    dispatch_dtype: str
    backend: object
    redundant_experts: int = 0


class OpCall(NamedTuple):
    """One call that :meth:`GroupTimer.time` prices, by what its time reads: the group (key id within the
    layout), the operation, the bytes, the dimension and, for an EP op, its kernel route and the MoE inputs."""

    group: int
    op: str
    bytes: float
    dim: str
    route: str = ""
    ep: EpInputs | None = None


class GroupTimer:
    """Build-once caches of placements, cost models and op times for one (plan, topology), keyed by value (the
    group's node-relative shape, the op's kind and bytes); ``time(op, stage)`` prices any comm op: collectives
    with :mod:`simulator.collectives`, MoE dispatch/combine (``dim == "ep"``) with :mod:`simulator.moe` under the
    scenario's ``moe:`` settings and the plan's MoE backend (``plan.moe_backend``).

    A timer is a value: two timers are equal when they read one :class:`LayoutTimes` and equal :class:`EpInputs`
    (then every time they give is the same), so it can be part of a frozen argument of a cached function."""

    def __init__(self, plan: ResolvedPlan, topology: Topology, calibration=None,
                 moe: MoeSettings | None = None, shared: LayoutTimes | None = None, batch: Batch | None = None
                 ) -> None:
        """``shared``: the :class:`LayoutTimes` of the plan's rank layout that the caller keeps between plans on
        this topology with this calibration and these MoE settings (plan search); None: the timer's own.
        ``batch``: the step's batch (a serving phase); default the plan's training micro-batch. The MoE layer routes
        the router tokens of its shape (``plan.shape_of(batch)``)."""
        self.plan, self.topology, self.calibration = plan, topology, calibration
        if plan.world_size > len(topology.gpus):
            raise ValueError(f"plan needs {plan.world_size} GPUs, topology has {len(topology.gpus)}")
        self.moe_settings = moe or DEFAULT_MOE_SETTINGS
        if shared is None:
            shared = LayoutTimes(plan.rank_layout, topology, calibration, self.moe_settings)
        elif not shared.serves(plan, topology, calibration, self.moe_settings):
            raise ValueError("GroupTimer: the shared LayoutTimes belong to another rank layout or topology")
        self.shared = shared
        self._moe: dict[tuple, MoeLayerComm] = {}
        self._routing: dict[tuple, Routing] = {}
        self.shape = plan.shape if batch is None else plan.shape_of(batch)
        self.ep = EpInputs(plan.model, max(1, round(self.shape.norm_tokens)), plan.recipe.moe_dispatch_dtype,
                           plan.moe_backend, plan.parallel.redundant_experts)
        self._nodes, self._local = shared.nodes, shared.local
        self._hash = hash((id(shared), self.ep))

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, GroupTimer) and other.shared is self.shared and other.ep == self.ep)

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def stage_rank(self) -> tuple[int, ...]:
        """Rank 0's pipeline: one representative rank per stage."""
        return self.plan.rank_groups("pp")[0]

    # ---- groups ---------------------------------------------------------------------------------------------
    def groups(self, kind: str) -> tuple[tuple[int, ...], ...]:
        """All groups of ``kind`` (rank_groups names, ``pp_pair:<stage>`` boundaries, ``embedding``,
        ``pp_mirror:<stage>``: stage s's rank and stage pp-1-s's, which hold the same stages of DualPipe's two
        copies of the model)."""
        hit = self.shared.groups.get(kind)
        if hit is None:    # the groups and each rank's group follow from the rank layout
            if kind.startswith(("pp_pair:", "pp_mirror:")) or kind == "embedding":
                pp = self.plan.parallel.pp
                a = int(kind.split(":")[1]) if kind != "embedding" else 0
                b = pp - 1 if kind == "embedding" else a + 1 if kind.startswith("pp_pair:") else pp - 1 - a
                groups = tuple((g[a], g[b]) for g in self.plan.rank_groups("pp"))
            else:
                groups = self.plan.rank_groups(kind)
            hit = self.shared.groups[kind] = groups, {r: i for i, g in enumerate(groups) for r in g}
        return hit[0]

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        groups = self.groups(kind)
        return groups[self.shared.groups[kind][1][rank]]

    def _group(self, kind: str, stage: int) -> tuple[str, tuple[int, ...]]:
        if kind in ("pp_pair", "pp_mirror"):
            kind = f"{kind}:{stage}"
        return kind, self.group_of(kind, self.stage_rank[stage])

    def key(self, kind: str, stage: int) -> tuple:
        """Value key of the ``kind`` group holding stage ``stage``'s rank: its kind and shape relative to the NVLink
        domains it occupies (nodes, or racks of a multi-node NVLink domain)."""
        keys = self.shared.keys
        if (kind, stage) not in keys:
            keys[kind, stage] = self._key(kind, stage)
        return keys[kind, stage]

    def key_id(self, kind: str, stage: int) -> int:
        """:meth:`key` as a small integer (equal keys, equal integers, within the rank layout)."""
        try:
            return self.shared.key_ids[kind, stage]
        except KeyError:
            ids = self.shared.ids
            i = self.shared.key_ids[kind, stage] = ids.setdefault(self.key(kind, stage), len(ids))
            return i

    def key_table(self, kinds: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
        """:meth:`key_id` of each group kind of ``kinds`` for each middle stage (1 to pp - 2), in that order."""
        pp = self.plan.parallel.pp
        table = self.shared.key_tables.get((kinds, pp))
        if table is None:
            table = self.shared.key_tables[kinds, pp] = tuple(tuple(self.key_id(g, s) for g in kinds)
                                                               for s in range(1, pp - 1))
        return table

    def _key(self, kind: str, stage: int) -> tuple:
        kind, group = self._group(kind, stage)
        base = min(self._nodes[r] for r in group)
        return kind.split(":")[0], tuple(sorted((self._nodes[r] - base, self._local[r]) for r in group))

    def model(self, kind: str, stage: int) -> GroupCostModel:
        """Cost model of the ``kind`` group holding stage ``stage``'s representative rank (one per group key:
        the group's node-relative shape stands for its placement within the rank layout)."""
        key = self.key(kind, stage)
        models = self.shared.models
        if key not in models:
            kind, group = self._group(kind, stage)
            gpus = [self.topology.gpus[r] for r in group]
            others = [[self.topology.gpus[r] for r in g] for g in self.groups(kind) if g != group]
            placement = place_group(self.topology, gpus, concurrent_groups=others)
            models[key] = build_cost_model(placement, calibration=self.calibration)
        return models[key]

    def link(self, model: GroupCostModel) -> str:
        p = model.placement
        if p.n_ranks == 1:
            return "none"
        if p.n_nodes > 1:
            nics = self.topology.cluster.node.nics
            return nics.kind if nics is not None else "network"
        return p.intra_transport

    # ---- MoE --------------------------------------------------------------------------------------------------
    def moe_routing(self, stage: int) -> Routing:
        """Routing of one MoE layer's tokens for one micro-batch on stage ``stage``'s EP group: the rank's router
        tokens (``RankShape.norm_tokens``) under the ``moe:`` settings, whatever backend moves them."""
        key = self.key("ep", stage)
        if key not in self._routing:
            s = self.moe_settings
            try:
                self._routing[key] = layer_routing(
                    self.ep.model, self.ep.tokens, self.model("ep", stage).placement,
                    distribution=s.router_distribution, zipf_exponent=s.zipf_exponent, node_limit=s.node_limit,
                    seed=s.seed, redundant=self.ep.redundant_experts)
            except UserError as exc:
                raise UserError(exc.message, key_path=_MOE_KEYS.get(exc.key_path or "", "moe")) from None
        return self._routing[key]

    def moe_comm(self, stage: int) -> MoeLayerComm:
        """Dispatch and combine of one MoE layer for one micro-batch on stage ``stage``'s EP group
        (:meth:`moe_routing`), priced by the plan's backend (``plan.moe_backend``)."""
        key = self.key("ep", stage)
        if key not in self._moe:
            nccl = self.model("ep", stage)
            s, ep = self.moe_settings, self.ep
            settings = comm_settings(s, ep.dispatch_dtype, ep.backend)
            routing = self.moe_routing(stage)
            try:
                self._moe[key] = moe_layer_comm(ep.model, routing.tokens, nccl.placement, settings,
                                                routing=routing, nccl_model=nccl)
            except UserError as exc:
                raise UserError(exc.message, key_path=_MOE_KEYS.get(exc.key_path or "", "moe")) from None
        return self._moe[key]

    def moe_algorithm(self, stage: int) -> str:
        """``backend`` plus ``/transport`` when the EP group spans nodes (comm table ``algorithm``)."""
        comm = self.moe_comm(stage)
        multi = self.model("ep", stage).placement.n_nodes > 1
        return self.ep.backend.comm_name + (f"/{comm.forward.transport}" if multi else "")

    # ---- ops --------------------------------------------------------------------------------------------------
    def time(self, op: CommOp, stage: int) -> OpTiming:
        """One call of ``op`` on the group of stage ``stage``."""
        if op.dim == "ep":
            call = OpCall(self.key_id(op.group, stage), op.op, op.bytes, op.dim, op.name, self.ep)
        else:
            call = OpCall(self.key_id(op.group, stage), op.op, op.bytes, op.dim)
        times = self.shared.times
        timing = times.get(call)
        if timing is None:
            timing = times[call] = self._time(op, stage)
        return timing

    def _time(self, op: CommOp, stage: int) -> OpTiming:
        model = self.model(op.group, stage)
        if model.placement.n_ranks == 1 or op.bytes <= 0:
            return OpTiming(0.0, "none", "none")
        if op.dim == "ep" and op.op == "all_to_all":   # dispatch / combine: the MoE backend's kernels
            direction, route = EP_KERNELS[op.name]
            k = getattr(getattr(self.moe_comm(stage), direction), route)
            return OpTiming(float(k.time_s), self.moe_algorithm(stage), k.bottleneck, float(k.counted_bytes))
        ev = evaluate(model, op.op, np.array([op.bytes]))
        p = model.placement
        k = (network_interference(model.coefficients.net_channels_per_nic * p.nics_per_node,
                                  self.topology.cluster.node.gpu.sms) if p.n_nodes > 1 else None)
        return OpTiming(float(ev.times_s[0]), f"{ev.algorithms[0]}/{ev.protocols[0]}", self.link(model),
                        interference=k)
