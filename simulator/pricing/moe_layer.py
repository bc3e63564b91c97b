"""MoE layers in the step-time engine: the busiest rank's expert GEMMs, the SMs the communication kernels hold, and
how much of the EP dispatch/combine the backend hides behind the experts.

The EP ops themselves are ordinary traffic ops (:func:`simulator.traffic.layer.ep_ops`), priced by
:meth:`simulator.pricing.groups.GroupTimer.time` with the MoE backend model on the EP group's placement. Per EP
placement :func:`moe_layer_timing`:
1. sizes the routed-expert GEMMs with the rows the most loaded rank's local experts get (the slowest rank sets the
   layer time: the other ranks wait for it in combine); ``imbalance`` = its tokens / the mean;
2. when the layer is streamed, the kernels keep ``reserved_sms`` of the GPU's SMs (DeepEP normal: 24) and the
   expert GEMMs run on the rest: x SMs / (SMs - reserved) (:func:`simulator.moe.sm_slowdown`);
3. :func:`ep_exposed` is the EP time the layer adds beyond the (slowed) expert FFN f: the sequential
   d + f + c or the streamed chunk pipeline (:func:`simulator.moe.layer_time`) minus f, forward and backward.
The slowed expert GEMMs are compute; everything else the layer adds for EP is ``exposed_comm["ep"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.compute.efficiency import ComputeEfficiency
from simulator.compute.layer import LayerTime
from simulator.errors import UserError
from simulator.hardware import GpuSpec
from simulator.model import ModelSpec
from simulator.moe import DEFAULT_MOE_COEFFICIENTS, MoeLayerComm, layer_time, sm_slowdown
from simulator.pricing.compute import expert_ffn_time


def ep_exposed(comm_s: float, expert_s: float, overlap: str,
               chunks: int = DEFAULT_MOE_COEFFICIENTS.pipeline_chunks) -> float:
    """Seconds ``comm_s`` of dispatch + combine add to a MoE layer whose experts take ``expert_s``: the layer's
    time under the backend's ``overlap`` (:func:`simulator.moe.layer_time`: sequential d + f + c, or the streamed
    pipeline, which depends on d + c only) minus the experts' own time."""
    return float(layer_time(comm_s, expert_s, 0.0, overlap, chunks)) - expert_s


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
    sm_slowdown: float
    algorithm: str

    @property
    def fwd_exposed_s(self) -> float:
        return ep_exposed(self.fwd_comm_s, self.layer.expert_fwd_s, self.comm.overlap)

    @property
    def bwd_exposed_s(self) -> float:
        return ep_exposed(self.bwd_comm_s, self.layer.expert_bwd_s, self.comm.overlap)

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


def moe_layer_timing(model: ModelSpec, etp: int, balanced: float, base: LayerTime, comm: MoeLayerComm,
                     algorithm: str, gpu: GpuSpec, eff: ComputeEfficiency, dtype: str) -> MoeLayerTiming:
    """One MoE layer of ``model`` on an EP group whose dispatch/combine is ``comm`` (module docstring); ``base`` is
    the layer at the expected (balanced) expert load from :func:`simulator.pricing.compute.layer_time`; ``etp``:
    the plan's expert tensor parallelism; ``balanced``: the expected rows per expert ``base`` was timed with
    (``RankShape.rows_per_expert``)."""
    try:
        slow = sm_slowdown(gpu.sms, comm.reserved_sms) if comm.overlap == "streamed" else 1.0
    except UserError as exc:
        raise UserError(exc.message, key_path="moe.backend") from None
    layer = _busiest_rank_layer(model, etp, balanced, base, comm, gpu, eff, dtype, slow)
    return MoeLayerTiming(comm, layer, slow, algorithm)


def _busiest_rank_layer(model: ModelSpec, etp: int, balanced: float, base: LayerTime, comm: MoeLayerComm,
                        gpu: GpuSpec, eff: ComputeEfficiency, dtype: str, slow: float) -> LayerTime:
    """``base`` with its routed-expert GEMMs replaced by those of the rank whose experts get the most tokens.

    ``base`` timed them at the balanced load (rows = routed tokens / local experts, the same shapes as here with
    equal rows), so removing the balanced times and adding the busiest rank's keeps every other part intact."""
    local = comm.expert_tokens.shape[1]
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
