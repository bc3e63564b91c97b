"""MoE layers in the step-time engine: dispatch/combine from :mod:`simulator.moe`, the busiest rank's expert GEMMs,
the SMs the communication kernels hold, and the backend's overlap.

Per EP placement (in practice once per plan and micro-batch shape) :func:`moe_layer_timing`:
1. routes the micro-batch's tokens of each EP rank (``MoeSettings``: uniform or Zipf, node limit, expected or
   sampled) and times dispatch and combine forward and backward on the EP group's placement
   (:func:`simulator.moe.moe_layer_comm`);
2. sizes the routed-expert GEMMs with the rows the most loaded rank's local experts get (the slowest rank sets the
   layer time: the other ranks wait for it in combine); ``imbalance`` = its tokens / the mean;
3. when the layer is streamed, the kernels keep ``reserved_sms`` of the GPU's SMs (DeepEP normal: 24) and the
   expert GEMMs run on the rest: x SMs / (SMs - reserved) (:func:`simulator.moe.sm_slowdown`);
4. exposed EP time = :func:`simulator.moe.layer_time` (sequential d + f + c, or the streamed chunk pipeline)
   minus the (slowed) expert FFN time f, forward and backward.
The slowed expert GEMMs are compute; everything else the layer adds for EP is ``exposed_comm["ep"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.collectives import GroupCostModel, GroupPlacement
from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.layer import LayerTime, expert_ffn_time
from simulator.errors import UserError
from simulator.hardware import GpuSpec
from simulator.model import ModelSpec
from simulator.moe import (
    DEFAULT_MOE_COEFFICIENTS,
    KernelTime,
    MoeLayerComm,
    MoeSettings,
    layer_time,
    moe_layer_comm,
    sm_slowdown,
)
from simulator.plan import ResolvedPlan

#: UserError key paths of simulator.moe -> the scenario key that sets them
_KEYS = {"topk_groups": "moe.node_limit", "zipf_exponent": "moe.zipf_exponent", "qps": "moe.qps",
         "transport": "moe.transport", "distribution": "moe.distribution", "dispatch_dtype": "moe.dispatch_dtype",
         "reserved_sms": "moe.backend", "capacity_factor": "model.moe.capacity_factor", "experts": "parallel.ep",
         "ep": "parallel.ep", "top_k": "model.moe.top_k"}
#: which kernel each EP op of the traffic list is (gradient of combine runs the dispatch route, and back)
_KERNEL = {"dispatch": ("forward", "dispatch"), "combine": ("forward", "combine"),
           "combine gradient": ("backward", "dispatch"), "dispatch gradient": ("backward", "combine")}


@dataclass(frozen=True)
class MoeLayerTiming:
    """One MoE layer for one micro-batch on the critical path of an EP group (module docstring).

    Attributes:
        comm: dispatch/combine forward and backward, routing included.
        layer: the layer's :class:`LayerTime` with the routed-expert GEMMs of the busiest rank (slowed by the SMs
            the streamed kernels hold).
        fwd_exposed_s, bwd_exposed_s: EP time the layer adds beyond its compute, forward and backward.
        sm_slowdown: factor on the expert GEMMs (1 when sequential).
        algorithm: ``backend`` plus ``/transport`` when the group spans nodes (comm table ``algorithm``).
    """

    comm: MoeLayerComm
    layer: LayerTime
    fwd_exposed_s: float
    bwd_exposed_s: float
    sm_slowdown: float
    algorithm: str
    placement: GroupPlacement

    @property
    def imbalance(self) -> float:
        """Busiest rank's expert tokens over the mean (1.0 = balanced)."""
        return self.comm.imbalance

    @property
    def fwd_comm_s(self) -> float:
        return float(self.comm.forward_dispatch_s + self.comm.forward_combine_s)

    @property
    def bwd_comm_s(self) -> float:
        return float(self.comm.backward_dispatch_s + self.comm.backward_combine_s)

    def kernel(self, name: str) -> KernelTime:
        """The kernel behind an EP op of the traffic list (``dispatch``, ``combine``, ``combine gradient``...)."""
        direction, which = _KERNEL[name]
        return getattr(getattr(self.comm, direction), which)

    def summary(self) -> dict:
        """What the step result reports about the MoE layers (SI; docs/step_time.md)."""
        c = self.comm
        out = {"backend": self.algorithm.split("/")[0], "transport": c.forward.transport,
                "overlap": c.overlap, "imbalance": self.imbalance, "max_rank_tokens": c.max_rank_tokens,
                "mean_rank_tokens": float(c.routing.rank_load.mean()), "reserved_sms": c.reserved_sms,
                "sm_slowdown": self.sm_slowdown, "dropped_tokens": c.routing.dropped_tokens,
                "forward_dispatch_s": c.forward_dispatch_s, "forward_combine_s": c.forward_combine_s,
                "backward_dispatch_s": c.backward_dispatch_s, "backward_combine_s": c.backward_combine_s,
                "expert_fwd_s": self.layer.expert_fwd_s, "expert_bwd_s": self.layer.expert_bwd_s,
                "fwd_exposed_s": self.fwd_exposed_s, "bwd_exposed_s": self.bwd_exposed_s}
        return {k: v if isinstance(v, (str, int)) else float(v) for k, v in out.items()}


def ep_tokens_per_rank(plan: ResolvedPlan) -> int:
    """Tokens of one micro-batch each EP rank routes: b s / (cp ulysses), split over TP with SP (as the EP traffic
    of :func:`simulator.traffic.layer.ep_ops`)."""
    p, t = plan.parallel, plan.training
    tokens = t.micro_batch * t.seq_len / (p.cp * p.ulysses) / (p.tp if p.sp else 1)
    return max(1, round(tokens))


def moe_layer_timing(model: ModelSpec, plan: ResolvedPlan, base: LayerTime, placement: GroupPlacement,
                     settings: MoeSettings, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str,
                     nccl_model: GroupCostModel | None = None) -> MoeLayerTiming:
    """Time one MoE layer of ``model`` on the EP group ``placement`` (module docstring); ``base`` is the layer at
    the expected (balanced) expert load from :func:`simulator.compute.layer.layer_time`; ``nccl_model`` the EP
    group's collectives cost model (calibrated) for the NCCL backend."""
    comm_settings = settings.comm_settings(plan.training.precision)
    try:
        comm = moe_layer_comm(model, ep_tokens_per_rank(plan), placement, comm_settings,
                              distribution=settings.distribution, zipf_exponent=settings.zipf_exponent,
                              node_limit=settings.node_limit, seed=settings.seed,
                              nccl_model=nccl_model if nccl_model and nccl_model.placement == placement else None)
        slow = (sm_slowdown(gpu.sms, comm.reserved_sms) if comm.overlap == "streamed" else 1.0)
    except UserError as exc:
        raise UserError(exc.message, key_path=_KEYS.get(exc.key_path or "", "moe")) from None
    layer = _busiest_rank_layer(model, plan, base, comm, gpu, eff, dtype, slow)
    chunks = DEFAULT_MOE_COEFFICIENTS.pipeline_chunks
    f_fwd, f_bwd = layer.expert_fwd_s, layer.expert_bwd_s
    fwd = float(layer_time(comm.forward_dispatch_s, f_fwd, comm.forward_combine_s, comm.overlap, chunks)) - f_fwd
    bwd = float(layer_time(comm.backward_dispatch_s, f_bwd, comm.backward_combine_s, comm.overlap, chunks)) - f_bwd
    algorithm = settings.backend + (f"/{comm.forward.transport}" if placement.n_nodes > 1 else "")
    return MoeLayerTiming(comm, layer, fwd, bwd, slow, algorithm, placement)


def _busiest_rank_layer(model: ModelSpec, plan: ResolvedPlan, base: LayerTime, comm: MoeLayerComm, gpu: GpuSpec,
                        eff: ComputeEfficiency, dtype: str, slow: float) -> LayerTime:
    """``base`` with its routed-expert GEMMs replaced by those of the rank whose experts get the most tokens.

    ``base`` timed them at the balanced load (rows = routed tokens / local experts, the same shapes as here with
    equal rows), so removing the balanced times and adding the busiest rank's keeps every other part intact."""
    p, t = plan.parallel, plan.training
    etp, local = p.etp, comm.expert_tokens.shape[1]
    tokens = t.micro_batch * t.seq_len / (p.cp * p.ulysses) / (p.tp if p.sp else 1)
    balanced = tokens * model.moe.top_k * etp / local  # simulator.model.flops._moe's expected rows per expert
    busiest = comm.expert_tokens[int(comm.routing.rank_load.argmax())] * etp
    if slow == 1.0 and np.allclose(busiest, balanced, rtol=1e-9, atol=0.0):
        return base  # balanced (uniform dropless routing): the shapes base was timed with
    old = expert_ffn_time(model, gpu, eff, dtype, [balanced] * local, etp)
    new = [t * slow for t in expert_ffn_time(model, gpu, eff, dtype, busiest, etp)]
    d_fwd, d_dgrad, d_wgrad = (n - o for n, o in zip(new, old, strict=True))
    return replace(base, fwd_s=base.fwd_s + d_fwd, fwd_gemm_s=base.fwd_gemm_s + d_fwd,
                   bwd_s=base.bwd_s + d_dgrad + d_wgrad, dgrad_s=base.dgrad_s + d_dgrad,
                   wgrad_s=base.wgrad_s + d_wgrad, expert_fwd_s=base.expert_fwd_s + d_fwd,
                   expert_bwd_s=base.expert_bwd_s + d_dgrad + d_wgrad)
