"""Time for one GPU's NIC to push a set of RDMA writes: the collectives message-rate model plus queue pairs.

:func:`simulator.collectives.nic_message_time` gives ``max(bytes / (line rate x efficiency), messages / message
rate)`` with the message rate of who issues the work (CPU proxy ~1.5 M/s, IBGDA ~6.1 M/s per NIC, NVSHMEM issue #8).
Expert-parallel kernels add one more limit: each peer's chunks travel in order on its queue pairs, credit-limited,
so a peer stream on ``qps`` QPs moves at most ``qps x q`` bytes/s and that time adds to the NIC's (1/R = 1/NIC +
1/(peers x qps x q)); ``q`` per issue mode is fitted (coefficients.py).
"""

from __future__ import annotations

import numpy as np

from simulator.collectives import DEFAULT_COEFFICIENTS, Coefficients, nic_message_time
from simulator.errors import UserError
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients

#: docs/interface.md --transport names -> the collectives package's issue modes
ISSUE = {"ibrc": "cpu_proxy", "ibgda": "ibgda"}


def issue_of(transport: str) -> str:
    if transport not in ISSUE:
        raise UserError(f"unknown transport {transport!r}; accepted: ibrc (CPU proxy), ibgda (GPU-initiated)",
                        key_path="transport")
    return ISSUE[transport]


def with_proxy_threads(coefficients: Coefficients, threads: int) -> Coefficients:
    """The collectives coefficients with the CPU proxy's message rate times ``threads`` (UCCL-EP style)."""
    rates = dict(coefficients.message_rate_per_s)
    rates["cpu_proxy"] = rates["cpu_proxy"] * threads
    return coefficients.model_copy(update={"message_rate_per_s": rates})


def rdma_send_time(bytes_, messages, peers, qps: int, nic_bw_Bps: float, issue: str,
                   c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS, cc: Coefficients = DEFAULT_COEFFICIENTS):
    """Seconds for one NIC to send ``bytes_`` in ``messages`` writes to ``peers`` peers over ``qps`` QPs each.

    numpy-broadcasting over bytes_/messages/peers. Zero bytes take zero time.
    """
    if qps < 1:
        raise UserError(f"queue pairs per peer must be >= 1, got {qps}", key_path="qps")
    b = np.asarray(bytes_, dtype=float)
    m = np.maximum(np.asarray(messages, dtype=float), 1.0)
    n = np.maximum(np.asarray(peers, dtype=float), 1.0)
    nic = nic_message_time(m, b / m, nic_bw_Bps, issue=issue, coefficients=cc)
    stream = b / (n * qps * c.qp_throughput_Bps[issue])
    return np.where(b > 0, nic + stream, 0.0)


def rdma_receive_time(bytes_, nic_bw_Bps: float, cc: Coefficients = DEFAULT_COEFFICIENTS):
    """Seconds for one NIC to take in ``bytes_`` at its effective line rate (receives cost no work requests)."""
    return np.asarray(bytes_, dtype=float) / (nic_bw_Bps * cc.nic_efficiency)


def message_regime(message_bytes, nic_bw_Bps: float, issue: str, cc: Coefficients = DEFAULT_COEFFICIENTS):
    """Achieved NIC bandwidth (B/s) for a stream of equal messages, and whether it is message-rate bound."""
    size = np.asarray(message_bytes, dtype=float)
    line = nic_bw_Bps * cc.nic_efficiency
    rate = cc.message_rate_per_s[issue] * size
    return np.minimum(line, rate), rate < line
