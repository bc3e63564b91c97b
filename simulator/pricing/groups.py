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

import numpy as np

from simulator.collectives import GroupCostModel, build_cost_model, evaluate, place_group
from simulator.errors import UserError
from simulator.moe import (
    DEFAULT_MOE_SETTINGS,
    MoeLayerComm,
    MoeSettings,
    Routing,
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
             "ep": "parallel.ep", "top_k": "model.moe.top_k"}


class GroupTimer:
    """Build-once caches of placements, cost models and op times for one (plan, topology), keyed by value (the
    group's node-relative shape, the op's kind and bytes); ``time(op, stage)`` prices any comm op: collectives
    with :mod:`simulator.collectives`, MoE dispatch/combine (``dim == "ep"``) with :mod:`simulator.moe` under the
    scenario's ``moe:`` settings and the plan's MoE backend (``plan.moe_backend``)."""

    def __init__(self, plan: ResolvedPlan, topology: Topology, calibration=None,
                 moe: MoeSettings | None = None, shared: dict | None = None, batch: Batch | None = None) -> None:
        """``shared``: a dict the caller keeps between plans on this topology with this calibration and these MoE
        settings (plan search); group keys and op times are stored there under the plan's rank layout (rank
        order and every grid size), which with the topology determines every group and its placement.
        ``batch``: the step's batch (a serving phase); default the plan's training micro-batch. The MoE layer routes
        the router tokens of its shape (``plan.shape_of(batch)``)."""
        self.plan, self.topology, self.calibration = plan, topology, calibration
        self.shape = plan.shape if batch is None else plan.shape_of(batch)
        if plan.world_size > len(topology.gpus):
            raise ValueError(f"plan needs {plan.world_size} GPUs, topology has {len(topology.gpus)}")
        self.moe_settings = moe or DEFAULT_MOE_SETTINGS
        self._groups: dict[str, tuple[tuple[int, ...], ...]] = {}
        self._of_rank: dict[str, dict[int, int]] = {}
        self._models: dict[tuple, GroupCostModel] = {}
        self._moe: dict[tuple, MoeLayerComm] = {}
        self._routing: dict[tuple, Routing] = {}
        self._times: dict[tuple, OpTiming] = {}
        self._keys: dict[tuple[str, int], tuple] = {}
        self._shared = shared
        self._layout = plan.rank_layout
        # small integers for the layout and for group keys (unique within ``shared``, or within this timer), so
        # that the keys of the caches hash a few ints instead of long tuples of rank positions
        layouts = {} if shared is None else shared.setdefault("layout ids", {})
        self._layout_id = layouts.setdefault(self._layout, len(layouts))
        self._ids: dict[tuple, int] = {} if shared is None else shared.setdefault("group key ids", {})
        self._key_ids: dict[tuple[str, int], int] = {}
        per_domain = topology.cluster.domain_gpus  # NVLink domains repeat: a group's shape within them is its key
        positions = None if shared is None else shared.get("rank positions")
        if positions is None:
            positions = ([r // per_domain for r in range(len(topology.gpus))],
                         [r % per_domain for r in range(len(topology.gpus))])
            if shared is not None:
                shared["rank positions"] = positions
        self._nodes, self._local = positions

    @cached_property
    def stage_rank(self) -> tuple[int, ...]:
        """Rank 0's pipeline: one representative rank per stage."""
        return self.plan.rank_groups("pp")[0]

    # ---- groups ---------------------------------------------------------------------------------------------
    def groups(self, kind: str) -> tuple[tuple[int, ...], ...]:
        """All groups of ``kind`` (rank_groups names, ``pp_pair:<stage>`` boundaries, ``embedding``,
        ``pp_mirror:<stage>``: stage s's rank and stage pp-1-s's, which hold the same stages of DualPipe's two
        copies of the model)."""
        if kind not in self._groups:
            # the groups and each rank's group follow from the rank layout: shared by its plans (plan search)
            shared_key = ("groups", self._layout_id, kind)
            hit = None if self._shared is None else self._shared.get(shared_key)
            if hit is None:
                if kind.startswith(("pp_pair:", "pp_mirror:")) or kind == "embedding":
                    pp = self.plan.parallel.pp
                    a = int(kind.split(":")[1]) if kind != "embedding" else 0
                    b = pp - 1 if kind == "embedding" else a + 1 if kind.startswith("pp_pair:") else pp - 1 - a
                    groups = tuple((g[a], g[b]) for g in self.plan.rank_groups("pp"))
                else:
                    groups = self.plan.rank_groups(kind)
                hit = groups, {r: i for i, g in enumerate(groups) for r in g}
                if self._shared is not None:
                    self._shared[shared_key] = hit
            self._groups[kind], self._of_rank[kind] = hit
        return self._groups[kind]

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        groups = self.groups(kind)
        return groups[self._of_rank[kind][rank]]

    def _group(self, kind: str, stage: int) -> tuple[str, tuple[int, ...]]:
        if kind in ("pp_pair", "pp_mirror"):
            kind = f"{kind}:{stage}"
        return kind, self.group_of(kind, self.stage_rank[stage])

    def key(self, kind: str, stage: int) -> tuple:
        """Value key of the ``kind`` group holding stage ``stage``'s rank: its kind and shape relative to the NVLink
        domains it occupies (nodes, or racks of a multi-node NVLink domain)."""
        if (kind, stage) not in self._keys:
            shared_key = ("group key", self._layout_id, kind, stage)
            if self._shared is not None and shared_key in self._shared:
                self._keys[(kind, stage)] = self._shared[shared_key]
            else:
                self._keys[(kind, stage)] = self._key(kind, stage)
                if self._shared is not None:
                    self._shared[shared_key] = self._keys[(kind, stage)]
        return self._keys[(kind, stage)]

    def key_id(self, kind: str, stage: int) -> int:
        """:meth:`key` as a small integer (equal keys, equal integers)."""
        try:
            return self._key_ids[kind, stage]
        except KeyError:
            pass
        shared_key = ("group key id", self._layout_id, kind, stage)   # the integer, per layout (plan search)
        i = None if self._shared is None else self._shared.get(shared_key)
        if i is None:
            i = self._ids.setdefault(self.key(kind, stage), len(self._ids))
            if self._shared is not None:
                self._shared[shared_key] = i
        self._key_ids[kind, stage] = i
        return i

    def _key(self, kind: str, stage: int) -> tuple:
        kind, group = self._group(kind, stage)
        base = min(self._nodes[r] for r in group)
        return kind.split(":")[0], tuple(sorted((self._nodes[r] - base, self._local[r]) for r in group))

    def model(self, kind: str, stage: int) -> GroupCostModel:
        """Cost model of the ``kind`` group holding stage ``stage``'s representative rank."""
        key = self.key(kind, stage)
        if key not in self._models:
            # shared between plans of one rank layout under the same value key as the op times (the group's
            # node-relative shape stands for its placement, within a plan and across the plans of a layout)
            shared_key = ("cost model", self._layout_id, self.key_id(kind, stage))
            if self._shared is not None and shared_key in self._shared:
                self._models[key] = self._shared[shared_key]
                return self._models[key]
            kind, group = self._group(kind, stage)
            gpus = [self.topology.gpus[r] for r in group]
            others = [[self.topology.gpus[r] for r in g] for g in self.groups(kind) if g != group]
            placement = place_group(self.topology, gpus, concurrent_groups=others)
            self._models[key] = build_cost_model(placement, calibration=self.calibration)
            if self._shared is not None:
                self._shared[shared_key] = self._models[key]
        return self._models[key]

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
            s, plan = self.moe_settings, self.plan
            try:
                self._routing[key] = layer_routing(
                    plan.model, max(1, round(self.shape.norm_tokens)), self.model("ep", stage).placement,
                    distribution=s.distribution, zipf_exponent=s.zipf_exponent, node_limit=s.node_limit, seed=s.seed)
            except UserError as exc:
                raise UserError(exc.message, key_path=_MOE_KEYS.get(exc.key_path or "", "moe")) from None
        return self._routing[key]

    def moe_comm(self, stage: int) -> MoeLayerComm:
        """Dispatch and combine of one MoE layer for one micro-batch on stage ``stage``'s EP group
        (:meth:`moe_routing`), priced by the plan's backend (``plan.moe_backend``)."""
        key = self.key("ep", stage)
        if key not in self._moe:
            nccl = self.model("ep", stage)
            s, plan = self.moe_settings, self.plan
            settings = s.comm_settings(plan.recipe.moe_dispatch_dtype, plan.moe_backend)
            routing = self.moe_routing(stage)
            try:
                self._moe[key] = moe_layer_comm(plan.model, routing.tokens, nccl.placement, settings,
                                                routing=routing, nccl_model=nccl)
            except UserError as exc:
                raise UserError(exc.message, key_path=_MOE_KEYS.get(exc.key_path or "", "moe")) from None
        return self._moe[key]

    def moe_algorithm(self, stage: int) -> str:
        """``backend`` plus ``/transport`` when the EP group spans nodes (comm table ``algorithm``)."""
        comm = self.moe_comm(stage)
        multi = self.model("ep", stage).placement.n_nodes > 1
        return self.plan.moe_backend.comm_name + (f"/{comm.forward.transport}" if multi else "")

    # ---- ops --------------------------------------------------------------------------------------------------
    def time(self, op: CommOp, stage: int) -> OpTiming:
        """One call of ``op`` on the group of stage ``stage``."""
        key = (self.key_id(op.group, stage), op.op, op.bytes, op.dim, op.name if op.dim == "ep" else "")
        timing = self._times.get(key)
        if timing is not None:
            return timing
        if self._shared is not None:
            moe_inputs = (self.plan.model, self.shape, self.plan.recipe.moe_dispatch_dtype,
                          self.plan.moe_backend) if op.dim == "ep" else ()
            shared_key = ("op time", self._layout_id, key, moe_inputs)
            timing = self._shared.get(shared_key)
            if timing is None:
                timing = self._shared[shared_key] = self._time(op, stage, key)
            self._times[key] = timing
            return timing
        return self._time(op, stage, key)

    def _time(self, op: CommOp, stage: int, key: tuple) -> OpTiming:
        if key not in self._times:
            model = self.model(op.group, stage)
            if model.placement.n_ranks == 1 or op.bytes <= 0:
                timing = OpTiming(0.0, "none", "none")
            elif op.dim == "ep" and op.op == "all_to_all":   # dispatch / combine: the MoE backend's kernels
                direction, route = EP_KERNELS[op.name]
                k = getattr(getattr(self.moe_comm(stage), direction), route)
                timing = OpTiming(float(k.time_s), self.moe_algorithm(stage), k.bottleneck, float(k.counted_bytes))
            else:
                ev = evaluate(model, op.op, np.array([op.bytes]))
                p = model.placement
                k = (network_interference(model.coefficients.net_channels_per_nic * p.nics_per_node,
                                          self.topology.cluster.node.gpu.sms) if p.n_nodes > 1 else None)
                timing = OpTiming(float(ev.times_s[0]), f"{ev.algorithms[0]}/{ev.protocols[0]}", self.link(model),
                                  interference=k)
            self._times[key] = timing
        return self._times[key]
