"""The MoE cost model behind one call: settings, and the dispatch/combine pair priced by the backend's kernel family.

The backends are objects of :mod:`simulator.implementation.moe_backends` (their name appears only there); this module reads
their attributes: the kernel family (:data:`KERNELS`), default transport, whether they can issue from the GPU,
reserve SMs, use several proxy threads, and their default overlap.

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
from simulator.implementation.moe_backends import (
    ALL_TO_ALL,
    DEEPEP_NORMAL,
    LOW_LATENCY,
    MOE_BACKENDS,
    NORMAL,
    MoeBackend,
)
from simulator.moe import kernels
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients
from simulator.moe.network import issue_of, with_proxy_threads
from simulator.moe.payload import token_bytes
from simulator.moe.routing import Routing

#: ``moe.backend`` / ``simulator moe --backend`` names, from the registry
BACKENDS = tuple(MOE_BACKENDS)
Backend = Literal[BACKENDS]  # type: ignore[valid-type]


class CommSettings(BaseModel):
    """How expert-parallel traffic is moved. ``None`` fields take the backend's default (table above)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Field(DEEPEP_NORMAL.name, description="communication library / kernel family")
    transport: Literal["ibrc", "ibgda"] | None = Field(None, description="who issues RDMA: CPU proxy or the GPU")
    qps: int | None = Field(None, ge=1, description="queue pairs per peer")
    dispatch_dtype: Literal["fp8", "bf16"] = Field("fp8", description="dispatch payload; combine is always bf16")
    ll_nvlink: bool = Field(False, description="low-latency kernels write NVLink-reachable peers over NVLink")
    reserved_sms: int | None = Field(None, ge=0, description="SMs the communication kernels occupy")
    overlap: Literal["sequential", "streamed"] | None = Field(None, description="dispatch->FFN->combine one after "
                                                                               "another, or streamed in chunks")

    @property
    def spec(self) -> MoeBackend:
        """The backend object (:mod:`simulator.implementation.moe_backends`) this names."""
        return MOE_BACKENDS[self.backend]

    def resolved_transport(self) -> str:
        transport = self.transport or self.spec.default_transport
        if transport == "ibgda" and not self.spec.gpu_issue:
            able = " or ".join(b.name for b in MOE_BACKENDS.values() if b.gpu_issue)
            raise UserError(f"backend {self.backend} issues RDMA from CPU proxy threads; --transport ibgda needs "
                            f"{able}", key_path="transport")
        return transport

    def resolved_overlap(self) -> str:
        return self.overlap or self.spec.overlap

    def resolved_sms(self, c: MoeCoefficients) -> int:
        if self.reserved_sms is not None:
            return self.reserved_sms
        return c.normal_sms if self.spec.reserves_sms else 0


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
    call = _Call(routing, placement, hidden, settings, transport, c, cc, nccl_model)
    d, cb, qps = KERNELS[settings.spec.kernel](call, dispatch_dtype or settings.dispatch_dtype)
    return EpComm(d, cb, settings.resolved_sms(c), transport, qps, settings.resolved_overlap())


@dataclass(frozen=True)
class _Call:
    """The arguments of one :func:`ep_comm` call a kernel family reads."""

    routing: Routing
    placement: GroupPlacement
    hidden: int
    settings: CommSettings
    transport: str
    c: MoeCoefficients
    cc: Coefficients
    nccl_model: GroupCostModel | None


Pair = tuple[kernels.KernelTime, kernels.KernelTime, int]


def _all_to_all(a: _Call, dtype: str) -> Pair:
    """NCCL all-to-all of the permuted tokens on the collectives cost model (one queue pair)."""
    model = a.nccl_model or nccl_cost_model(a.placement, a.cc)
    return _nccl(a.routing, model, a.hidden, dtype, a.c), _nccl(a.routing, model, a.hidden, "bf16", a.c), \
        a.settings.qps or 1


def _normal(a: _Call, dtype: str) -> Pair:
    """DeepEP's normal kernels (:func:`simulator.moe.kernels.deepep_normal`)."""
    qps = a.settings.qps or (a.c.normal_ibgda_qps if a.transport == "ibgda" else 1)
    issue = issue_of(a.transport)
    return (kernels.deepep_normal(a.routing, a.placement, a.hidden, dtype, issue, qps, a.c, a.cc),
            kernels.deepep_normal(a.routing, a.placement, a.hidden, "bf16", issue, qps, a.c, a.cc), qps)


def _low_latency(a: _Call, dtype: str) -> Pair:
    """The low-latency routes (:func:`simulator.moe.kernels.low_latency`), on several CPU proxy threads when the
    backend has them."""
    qps = a.settings.qps or max(1, a.routing.experts // a.routing.ep)
    net = with_proxy_threads(a.cc, a.c.proxy_threads) if a.settings.spec.proxy_threads else a.cc
    issue, nvl = issue_of(a.transport), a.settings.ll_nvlink
    return (kernels.low_latency(a.routing, a.placement, a.hidden, dtype, issue, qps, nvl, True, a.c, net),
            kernels.low_latency(a.routing, a.placement, a.hidden, "bf16", issue, qps, nvl, False, a.c, net), qps)


#: kernel family (``MoeBackend.kernel``) -> the function pricing one dispatch/combine pair and its queue pairs
KERNELS = {ALL_TO_ALL: _all_to_all, NORMAL: _normal, LOW_LATENCY: _low_latency}


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
