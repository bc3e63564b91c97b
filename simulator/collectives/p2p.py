"""Message rate per NIC (CPU proxy vs IBGDA), the ring P2P pass of context parallelism, and all-to-all with a
per-peer byte matrix (MoE)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS, Coefficients
from simulator.collectives.model import GroupCostModel, evaluate
from simulator.errors import UserError


def nic_message_time(n_messages, message_bytes, nic_bw_Bps: float, issue: str = "cpu_proxy",
                     coefficients: Coefficients = DEFAULT_COEFFICIENTS, nic_efficiency: float | None = None):
    """Seconds to push ``n_messages`` messages of ``message_bytes`` each through one NIC.

    ``max(bytes / (line rate * efficiency), messages / message rate)``: a CPU proxy posts ~1.5 M work requests/s per
    NIC, IBGDA ~6.1 M/s (NVSHMEM issue #8 saturation points on a 50 GB/s NIC); large messages reach the same
    bandwidth either way (nccl#1615). Works on numpy arrays (broadcasting).
    """
    if issue not in coefficients.message_rate_per_s:
        raise UserError(f"unknown network issue mode {issue!r}; accepted: cpu_proxy, ibgda", key_path="transport")
    eff = coefficients.nic_efficiency if nic_efficiency is None else nic_efficiency
    n = np.asarray(n_messages, dtype=float)
    size = np.asarray(message_bytes, dtype=float)
    return np.maximum(n * size / (nic_bw_Bps * eff), n / coefficients.message_rate_per_s[issue])


@dataclass(frozen=True)
class RingPass:
    """A ring P2P pass: n-1 steps, each sending one block to rank+1 while receiving one from rank-1."""

    step_comm_s: np.ndarray
    exposed_s: np.ndarray

    @property
    def total_comm_s(self) -> float:
        return float(self.step_comm_s.sum())

    @property
    def total_exposed_s(self) -> float:
        return float(self.exposed_s.sum())


def ring_pass(model: GroupCostModel, block_bytes: float, compute_s=0.0,
              overlap: Callable[[int, float, float], float] | None = None) -> RingPass:
    """Ring attention / CP K-V pass: n-1 sendrecv steps of ``block_bytes``.

    Args:
        compute_s: compute available to hide step i's transfer (scalar or length n-1 array).
        overlap: optional hook ``(step, comm_s, compute_s) -> exposed_s``; default ``max(0, comm - compute)``.
    """
    steps = max(model.placement.n_ranks - 1, 0)
    comm = evaluate(model, "sendrecv", np.full(steps, float(block_bytes))).times_s
    compute = np.broadcast_to(np.asarray(compute_s, dtype=float), (steps,))
    if overlap is None:
        exposed = np.maximum(comm - compute, 0.0)
    else:
        exposed = np.array([overlap(i, float(comm[i]), float(compute[i])) for i in range(steps)])
    return RingPass(comm, exposed)


def all_to_all_matrix_time(model: GroupCostModel, bytes_matrix) -> float:
    """All-to-all where rank i sends ``bytes_matrix[i, j]`` to rank j (ranks node-major: rank // ranks_per_node).

    The slowest of: each rank's NVLink send and receive volume to same-node peers, each node's network send and
    receive volume (over its NICs, fabric oversubscription applied) and its message-rate bound (one work request
    per remote peer and per network chunk), plus the direct all-to-all latency.
    """
    p, c = model.placement, model.coefficients
    m = np.asarray(bytes_matrix, dtype=float)
    n, k = p.n_ranks, p.ranks_per_node
    if m.shape != (n, n):
        raise UserError(f"bytes matrix must be {n}x{n}, got {m.shape}", key_path="bytes_matrix")
    node = np.arange(n) // k
    same = node[:, None] == node[None, :]
    np.fill_diagonal(same, False)
    times = [0.0]
    p2p = model.p2p_links
    if k > 1:
        bw = p2p[p.intra_transport]["simple"].bandwidth_Bps
        intra = np.where(same, m, 0.0)
        times.append(max(intra.sum(1).max(), intra.sum(0).max()) / bw)
    if p.n_nodes > 1:
        remote = np.where(node[:, None] != node[None, :], m, 0.0)
        per_node_out = np.bincount(node, weights=remote.sum(1), minlength=p.n_nodes)
        per_node_in = np.bincount(node, weights=remote.sum(0), minlength=p.n_nodes)
        bw = p2p["net"]["simple"].bandwidth_Bps / p.fabric_oversubscription
        times.append(max(per_node_out.max(), per_node_in.max()) / bw)
        chunks = np.where(remote > 0, np.ceil(remote / c.net_chunk_bytes), 0.0)
        msgs = np.bincount(node, weights=chunks.sum(1), minlength=p.n_nodes).max() / p.nics_per_node
        times.append(msgs * model.seconds_per_message)
    return _direct_latency(model) + max(times) if n > 1 else max(times)


def _direct_latency(model: GroupCostModel) -> float:
    """Latency of the direct all-to-all: the smallest finite one over its protocols (LL; NCCL's tuner picks it for
    the latency term). Infeasible rows (LL128 for point-to-point; hierarchical on one node) carry inf."""
    table = model.tables["all_to_all"]
    rows = [float(table.terms[i, 0]) for i, algo in enumerate(table.algorithms) if algo == "direct"]
    return min(t for t in rows if np.isfinite(t))
