"""The hook the step-time engine calls once per MoE layer configuration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.collectives import (
    DEFAULT_COEFFICIENTS,
    Coefficients,
    GroupCostModel,
    GroupPlacement,
    place_group,
)
from simulator.errors import UserError
from simulator.model import ModelSpec
from simulator.moe.backends import DEFAULT_SETTINGS, CommSettings, EpComm, ep_comm, nccl_cost_model
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients
from simulator.moe.eplb import eplb_slots
from simulator.moe.overlap import layer_time, sm_slowdown
from simulator.moe.routing import Routing, expert_weights, route
from simulator.topology import Topology


@dataclass(frozen=True)
class MoeLayerComm:
    """Expert-parallel communication of one MoE layer for one micro-batch, forward and backward.

    Forward: dispatch (``dispatch_dtype``) then combine (BF16). Backward runs the routes the other way: the
    gradient of combine is a dispatch-shaped exchange and the gradient of dispatch a combine-shaped one, both BF16.
    ``expert_tokens`` are the rows each rank's local experts multiply (padding included): the expert GEMM sizes.
    """

    routing: Routing
    forward: EpComm
    backward: EpComm

    @property
    def forward_dispatch_s(self) -> float:
        return self.forward.dispatch.time_s

    @property
    def forward_combine_s(self) -> float:
        return self.forward.combine.time_s

    @property
    def backward_dispatch_s(self) -> float:
        """Gradient of combine: output gradients sent to the experts (dispatch route, BF16)."""
        return self.backward.dispatch.time_s

    @property
    def backward_combine_s(self) -> float:
        """Gradient of dispatch: input gradients returned to the token owners (combine route, BF16)."""
        return self.backward.combine.time_s

    @property
    def reserved_sms(self) -> int:
        return self.forward.reserved_sms

    @property
    def overlap(self) -> str:
        return self.forward.overlap

    @property
    def expert_tokens(self) -> np.ndarray:
        """(ep, local experts) tokens per local expert of each rank."""
        return self.routing.expert_load

    @property
    def max_rank_tokens(self) -> float:
        """Tokens the busiest rank's experts process: it sets the layer time."""
        return float(self.routing.rank_load.max())

    @property
    def imbalance(self) -> float:
        return self.routing.imbalance

    def layer_time_s(self, expert_compute_s: float, total_sms: int, backward: bool = False,
                     chunks: int | None = None, c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS) -> float:
        """Dispatch + expert FFN + combine of this layer, given the busiest rank's expert FFN time on all SMs.

        When streamed, the FFN runs on the SMs communication leaves (x SMs/(SMs - k)) while the kernels move data.
        """
        comm = self.backward if backward else self.forward
        compute = expert_compute_s
        if comm.overlap == "streamed":
            compute *= sm_slowdown(total_sms, comm.reserved_sms)
        return layer_time(comm.dispatch.time_s, compute, comm.combine.time_s, comm.overlap,
                          chunks or c.pipeline_chunks)


def ep_placement(topology: Topology, gpus: Sequence[int | str]) -> GroupPlacement:
    """The EP group's view of the hardware (node-major rank order), via :func:`simulator.collectives.place_group`."""
    return place_group(topology, gpus)


def layer_routing(model: ModelSpec, tokens_per_rank: int, placement: GroupPlacement, *, distribution="uniform",
                  zipf_exponent: float = 1.0, node_limit: int | None = None, seed: int | None = None,
                  redundant: int = 0) -> Routing:
    """The routing of ``tokens_per_rank`` tokens on each rank of the EP group ``placement`` to ``model``'s experts
    (:func:`simulator.moe.route`; capacity factor from ``model.moe``), whatever backend moves them. ``redundant`` > 0:
    EPLB's ``experts + redundant`` slots (:func:`simulator.moe.eplb.eplb_slots`) are what the tokens are routed to."""
    if model.moe is None:
        raise UserError(f"model {model.name} has no MoE layers", key_path="model.moe")
    moe = model.moe
    experts = moe.experts
    if redundant:
        distribution = eplb_slots(expert_weights(experts, distribution, zipf_exponent), redundant,
                                  placement.n_ranks).weights
        experts += redundant
    return route(tokens_per_rank, moe.top_k, experts, placement.n_ranks, distribution=distribution,
                 zipf_exponent=zipf_exponent, node_limit=node_limit, ranks_per_node=placement.ranks_per_node,
                 capacity_factor=moe.capacity_factor, seed=seed)


def moe_layer_comm(model: ModelSpec, tokens_per_rank: int, placement: GroupPlacement,
                   settings: CommSettings = DEFAULT_SETTINGS, *, distribution="uniform", zipf_exponent: float = 1.0,
                   node_limit: int | None = None, seed: int | None = None, routing: Routing | None = None,
                   c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS, cc: Coefficients = DEFAULT_COEFFICIENTS,
                   nccl_model: GroupCostModel | None = None) -> MoeLayerComm:
    """EP communication of one MoE layer of ``model`` for ``tokens_per_rank`` tokens on each EP rank.

    Args:
        placement: the EP group on the hardware (:func:`ep_placement`, or
            :func:`simulator.collectives.placement_for_profile`); its rank count is the EP size.
        settings: backend, transport, queue pairs, dispatch dtype, overlap.
        distribution, zipf_exponent, node_limit, seed: routing (see :func:`simulator.moe.route`); the capacity
            factor comes from ``model.moe.capacity_factor``.
        routing: a routing computed before (skips routing).
        nccl_model: the NCCL backend's collectives cost model of ``placement`` (default: built once here with
            :func:`simulator.moe.backends.nccl_cost_model`; pass a calibrated one to calibrate NCCL EP).
    """
    if routing is None:
        routing = layer_routing(model, tokens_per_rank, placement, distribution=distribution,
                                zipf_exponent=zipf_exponent, node_limit=node_limit, seed=seed)
    if settings.spec.uses_collectives_model and nccl_model is None:
        nccl_model = nccl_cost_model(placement, cc)
    forward = ep_comm(routing, placement, model.hidden, settings, c, cc, nccl_model=nccl_model)
    backward = ep_comm(routing, placement, model.hidden, settings, c, cc, dispatch_dtype="bf16", nccl_model=nccl_model)
    return MoeLayerComm(routing, forward, backward)
