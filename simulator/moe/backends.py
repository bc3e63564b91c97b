"""The four communication backends behind one call: settings, defaults, and the dispatch/combine pair.

| backend | network issue | route | SMs taken | overlap |
|---|---|---|---|---|
| ``nccl`` | CPU proxy | all-to-all of top-k copies (Megatron alltoall dispatcher) | 0 (runs alone) | sequential |
| ``deepep_normal`` | ibrc (default) or ibgda | per rank (NVLink) / per node then NVLink forward | 24 | streamed |
| ``deepep_low_latency`` | ibgda (default) or ibrc | one write per (token, expert), RDMA to every peer | 0 (hook) | streamed |
| ``cpu_proxy`` | several CPU proxy threads (UCCL-EP) | as low-latency | 0 | streamed |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from simulator.collectives import (
    DEFAULT_COEFFICIENTS,
    Coefficients,
    GroupCostModel,
    GroupPlacement,
    all_to_all_matrix_time,
    build_cost_model,
)
from simulator.errors import UserError
from simulator.moe import kernels
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients
from simulator.moe.network import issue_of, with_proxy_threads
from simulator.moe.payload import token_bytes
from simulator.moe.routing import Routing

BACKENDS = ("nccl", "deepep_normal", "deepep_low_latency", "cpu_proxy")
Backend = Literal["nccl", "deepep_normal", "deepep_low_latency", "cpu_proxy"]
_DEFAULT_TRANSPORT = {"nccl": "ibrc", "deepep_normal": "ibrc", "deepep_low_latency": "ibgda", "cpu_proxy": "ibrc"}


class CommSettings(BaseModel):
    """How expert-parallel traffic is moved. ``None`` fields take the backend's default (table above)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Field("deepep_normal", description="communication library / kernel family")
    transport: Literal["ibrc", "ibgda"] | None = Field(None, description="who issues RDMA: CPU proxy or the GPU")
    qps: int | None = Field(None, ge=1, description="queue pairs per peer")
    dispatch_dtype: Literal["fp8", "bf16"] = Field("fp8", description="dispatch payload; combine is always bf16")
    ll_nvlink: bool = Field(False, description="low-latency kernels write NVLink-reachable peers over NVLink")
    reserved_sms: int | None = Field(None, ge=0, description="SMs the communication kernels occupy")
    overlap: Literal["sequential", "streamed"] | None = Field(None, description="dispatch->FFN->combine one after "
                                                                               "another, or streamed in chunks")

    def resolved_transport(self) -> str:
        transport = self.transport or _DEFAULT_TRANSPORT[self.backend]
        if self.backend in ("nccl", "cpu_proxy") and transport == "ibgda":
            raise UserError(f"backend {self.backend} issues RDMA from CPU proxy threads; --transport ibgda needs "
                            "deepep_normal or deepep_low_latency", key_path="transport")
        return transport

    def resolved_overlap(self) -> str:
        return self.overlap or ("sequential" if self.backend == "nccl" else "streamed")

    def resolved_sms(self, c: MoeCoefficients) -> int:
        if self.reserved_sms is not None:
            return self.reserved_sms
        return c.normal_sms if self.backend == "deepep_normal" else 0


DEFAULT_SETTINGS = CommSettings()


@dataclass(frozen=True)
class EpComm:
    """Dispatch and combine of one forward MoE layer, and what they cost the rest of the GPU."""

    dispatch: kernels.KernelTime
    combine: kernels.KernelTime
    reserved_sms: int
    transport: str
    qps: int
    overlap: str


def ep_comm(routing: Routing, placement: GroupPlacement, hidden: int, settings: CommSettings = DEFAULT_SETTINGS,
            c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS, cc: Coefficients = DEFAULT_COEFFICIENTS,
            dispatch_dtype: str | None = None, nccl_model: GroupCostModel | None = None) -> EpComm:
    """Time of dispatch (``settings.dispatch_dtype`` unless ``dispatch_dtype`` overrides) and combine (BF16).

    ``nccl_model``: a collectives cost model of ``placement`` built before (:func:`nccl_cost_model`; the step-time
    engine passes its calibrated one), so the NCCL backend does not rebuild it per call."""
    transport = settings.resolved_transport()
    issue = issue_of(transport)
    dtype = dispatch_dtype or settings.dispatch_dtype
    b = settings.backend
    if b == "nccl":
        qps = settings.qps or 1
        model = nccl_model or nccl_cost_model(placement, cc)
        d, cb = _nccl(routing, model, hidden, dtype, c), _nccl(routing, model, hidden, "bf16", c)
    elif b == "deepep_normal":
        qps = settings.qps or (c.normal_ibgda_qps if transport == "ibgda" else 1)
        d = kernels.deepep_normal(routing, placement, hidden, dtype, issue, qps, c, cc)
        cb = kernels.deepep_normal(routing, placement, hidden, "bf16", issue, qps, c, cc)
    else:
        qps = settings.qps or max(1, routing.experts // routing.ep)
        net = with_proxy_threads(cc, c.proxy_threads) if b == "cpu_proxy" else cc
        d = kernels.low_latency(routing, placement, hidden, dtype, issue, qps, settings.ll_nvlink, True, c, net)
        cb = kernels.low_latency(routing, placement, hidden, "bf16", issue, qps, settings.ll_nvlink, False, c, net)
    return EpComm(d, cb, settings.resolved_sms(c), transport, qps, settings.resolved_overlap())


def nccl_cost_model(placement: GroupPlacement, cc: Coefficients = DEFAULT_COEFFICIENTS,
                    calibration=None) -> GroupCostModel:
    """The collectives cost model the NCCL backend runs on: ``placement`` with CPU-proxy network issue."""
    return build_cost_model(placement.model_copy(update={"net_issue": "cpu_proxy"}), cc, calibration=calibration)


def _nccl(routing: Routing, model: GroupCostModel, hidden: int, dtype: str, c: MoeCoefficients) -> kernels.KernelTime:
    """NCCL all-to-all of the permuted tokens (one copy per selected expert; padded to capacity when one is set).
    Dropless: the per-expert counts go to the host first (sync) and are exchanged by a small all-to-all."""
    p = model.placement
    tb = token_bytes(hidden, dtype, c)
    matrix = routing.selections if routing.capacity is None else routing.padded_selections
    t_data = all_to_all_matrix_time(model, matrix * tb)
    terms = {"all_to_all": t_data}
    if routing.capacity is None:
        counts = np.full((routing.ep, routing.ep), float(routing.experts_per_rank * c.nccl_metadata_bytes))
        terms["metadata"] = all_to_all_matrix_time(model, counts) + c.nccl_host_sync_s
    counted = float(matrix.sum(1).mean()) * tb
    return kernels.KernelTime(sum(terms.values()), counted, "rdma" if p.n_nodes > 1 else "nvlink",
                              "host" if terms.get("metadata", 0.0) > t_data else ("rdma" if p.n_nodes > 1 else "nvlink"),
                              terms)
