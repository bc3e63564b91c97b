"""Expert-parallel (MoE) communication: routing, dispatch/combine per backend, overlap with the expert FFN.

Public API: :func:`route` -> :class:`Routing`; :class:`CommSettings` and :func:`ep_comm` (dispatch/combine of a
routed batch on a placed group); :func:`moe_layer_comm` -> :class:`MoeLayerComm` (the step-time engine's hook);
:func:`layer_time` (sequential vs streamed), :func:`sm_slowdown`; :func:`token_bytes`; :func:`rdma_send_time`
(proxy vs IBGDA with queue pairs); :class:`MoeSettings` (the scenario's ``moe:`` section). See
docs/moe.md.
"""

from simulator.moe.backends import BACKENDS, CommSettings, EpComm, ep_comm
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients, format_moe_coefficients
from simulator.moe.kernels import KernelTime
from simulator.moe.layer import MoeLayerComm, ep_placement, layer_routing, moe_layer_comm
from simulator.moe.network import message_regime, rdma_send_time
from simulator.moe.overlap import layer_time, sm_slowdown
from simulator.moe.payload import token_bytes
from simulator.moe.routing import Routing, expert_weights, route
from simulator.moe.settings import DEFAULT_MOE_SETTINGS, MoeSettings, comm_settings

__all__ = [
    "BACKENDS", "DEFAULT_MOE_COEFFICIENTS", "DEFAULT_MOE_SETTINGS", "CommSettings", "EpComm", "KernelTime", "MoeCoefficients",
    "MoeLayerComm", "MoeSettings", "Routing", "comm_settings", "ep_comm", "ep_placement", "expert_weights", "format_moe_coefficients",
    "layer_routing", "layer_time", "message_regime", "moe_layer_comm", "rdma_send_time", "route", "sm_slowdown", "token_bytes",
]
