"""Dispatch and combine time of each backend on a routed batch (DeepEP normal / low-latency, NCCL, CPU proxy).

Every function takes a :class:`~simulator.moe.routing.Routing`, the group's
:class:`~simulator.collectives.GroupPlacement` (EP ranks, node-major) and returns a :class:`KernelTime`. Times are
for the slowest rank (its send or receive volume on its busiest link). Bandwidths follow DeepEP's convention: the
bytes DeepEP's test scripts count, over the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import log2

import numpy as np

from simulator.collectives import DEFAULT_COEFFICIENTS, Coefficients, GroupPlacement
from simulator.errors import UserError
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients
from simulator.moe.network import rdma_receive_time, rdma_send_time
from simulator.moe.payload import token_bytes
from simulator.moe.routing import Routing


@dataclass(frozen=True)
class KernelTime:
    """One dispatch or combine.

    Attributes:
        time_s: kernel time of the slowest rank.
        counted_bytes: bytes per rank DeepEP's tests count for this kernel (see docs/moe.md).
        bottleneck: the link type the bandwidth is reported for (``nvlink`` inside a node, ``rdma`` across).
        limiting: the term that set the time (``nvlink``, ``rdma``, ``message_rate``, ``host``).
        terms_s: every term, for explanation.
    """

    time_s: float
    counted_bytes: float
    bottleneck: str
    limiting: str
    terms_s: dict[str, float]

    @property
    def bandwidth_Bps(self) -> float:
        return self.counted_bytes / self.time_s if self.time_s > 0 else 0.0


def nic_bandwidth_per_rank(p: GroupPlacement) -> float:
    """Line rate of the NIC share one rank gets (one NIC per GPU on HGX; fewer NICs are shared)."""
    if p.nics_per_node == 0:
        return 0.0
    return p.nic_bw_Bps * min(1.0, p.nics_per_node / p.ranks_per_node) / p.nic_sharing


def _layout(routing: Routing, p: GroupPlacement) -> tuple[np.ndarray, np.ndarray]:
    if routing.ep != p.n_ranks or routing.ranks_per_node != p.ranks_per_node:
        raise UserError(f"routing for EP {routing.ep} at {routing.ranks_per_node} per node does not match the group "
                        f"({p.n_ranks} ranks, {p.ranks_per_node} per node)", key_path="ep")
    ranks = np.arange(routing.ep)
    return ranks // p.ranks_per_node, ranks % p.ranks_per_node


def _nvlink_time(send: np.ndarray, recv: np.ndarray, p: GroupPlacement, efficiency: float) -> float:
    if p.ranks_per_node == 1:
        return 0.0
    return float(max(send.max(), recv.max())) / (p.intra_bw_Bps * efficiency)


def deepep_normal(routing: Routing, p: GroupPlacement, hidden: int, dtype: str, transport_issue: str, qps: int,
                  c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS, cc: Coefficients = DEFAULT_COEFFICIENTS) -> KernelTime:
    """DeepEP normal (high-throughput) kernel, dispatch with ``dtype`` or combine (call with ``bf16``).

    Inside a node: each token goes once to each rank holding one of its experts, over NVLink. Across nodes
    (DeepEP internode.cu): once per node over RDMA to the rank with the same local index, which forwards it over
    NVLink to the node's ranks that need it; the two stages are pipelined in chunks, so the slower sets the time.
    Combine runs the same routes backwards (reduced per rank, then per node), in BF16.
    """
    node, local = _layout(routing, p)
    tb = token_bytes(hidden, dtype, c)
    rt = routing.rank_tokens
    eff = c.normal_nvlink_efficiency
    if p.n_nodes == 1:
        nvl = rt * (1.0 - np.eye(routing.ep))
        t_nvl = _nvlink_time(nvl.sum(1) * tb, nvl.sum(0) * tb, p, eff)
        counted = float(rt.sum(0).mean()) * tb
        return KernelTime(c.kernel_latency_s + t_nvl, counted, "nvlink", "nvlink", {"nvlink": t_nvl})
    forwarded = rt * (local[:, None] != local[None, :])
    recv_nvl = forwarded.sum(0) * tb
    send_nvl = np.zeros((p.ranks_per_node, p.n_nodes))
    np.add.at(send_nvl, (np.repeat(local, routing.ep), np.tile(node, routing.ep)), forwarded.ravel())
    t_nvl = _nvlink_time(send_nvl.ravel() * tb, recv_nvl, p, eff)
    t_rdma, limiting = _normal_rdma(routing, p, node, local, tb, transport_issue, qps, c, cc)
    counted = float(routing.node_tokens.sum(1).mean()) * tb
    terms = {"nvlink": t_nvl, "rdma": t_rdma}
    return KernelTime(c.kernel_latency_s + max(terms.values()), counted, "rdma",
                      "nvlink" if t_nvl >= t_rdma else limiting, terms)


def _normal_rdma(routing, p, node, local, tb, issue, qps, c, cc) -> tuple[float, str]:
    remote = routing.node_tokens * (np.arange(p.n_nodes)[None, :] != node[:, None])
    nic = nic_bandwidth_per_rank(p)
    chunks = np.ceil(remote / c.normal_rdma_chunk_tokens)
    send = rdma_send_time(remote.sum(1) * tb, chunks.sum(1), (remote > 0).sum(1), qps, nic, issue, c, cc)
    recv_tokens = np.zeros(routing.ep)
    for n in range(p.n_nodes):  # rank (n, l) receives from every other node's rank with local index l
        dst = n * p.ranks_per_node + local
        np.add.at(recv_tokens, dst, remote[:, n])
    recv = rdma_receive_time(recv_tokens * tb, nic, cc)
    t = float(max(send.max(), recv.max()))
    return t, _send_limit(remote.sum(1) * tb, chunks.sum(1), nic, issue, cc)


def _send_limit(bytes_: np.ndarray, messages: np.ndarray, nic_Bps: float, issue: str, cc: Coefficients) -> str:
    """``message_rate`` when the busiest sender posts messages slower than its bytes drain at line rate."""
    i = int(np.argmax(bytes_))
    by_rate = messages[i] / cc.message_rate_per_s[issue]
    return "message_rate" if by_rate > bytes_[i] / (nic_Bps * cc.nic_efficiency) else "rdma"


def low_latency(routing: Routing, p: GroupPlacement, hidden: int, dtype: str, issue: str, qps: int | None,
                use_nvlink: bool = False, header: bool = True, c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS,
                cc: Coefficients = DEFAULT_COEFFICIENTS) -> KernelTime:
    """Token-level kernel (DeepEP low-latency; UCCL-EP through a CPU proxy): one RDMA write per (token, expert),
    from every GPU straight to every peer, no forwarding. With ``use_nvlink`` peers in the same node are written
    over NVLink instead. Time: fixed part + the slowest rank's send (NIC bandwidth, message rate, QPs) or receive.
    """
    node, _ = _layout(routing, p)
    tb = token_bytes(hidden, dtype, c, c.ll_message_header_bytes if header else 0)
    sel = routing.selections
    same = node[:, None] == node[None, :]
    net = np.where(same, 0.0, sel) if use_nvlink else sel
    qps = qps or max(1, routing.experts // routing.ep)
    nic = nic_bandwidth_per_rank(p) if p.nics_per_node else p.pcie_bw_Bps
    send = rdma_send_time(net.sum(1) * tb, net.sum(1), (net > 0).sum(1), qps, nic, issue, c, cc)
    recv = rdma_receive_time(net.sum(0) * tb, nic, cc)
    terms = {"rdma": float(max(send.max(), recv.max()))}
    if use_nvlink:
        nvl = np.where(same, sel, 0.0) * (1.0 - np.eye(routing.ep))
        terms["nvlink"] = _nvlink_time(nvl.sum(1) * tb, nvl.sum(0) * tb, p, c.normal_nvlink_efficiency)
    fixed = c.ll_latency_s + c.ll_per_node_hop_s * log2(p.n_nodes)
    limiting = max(terms, key=terms.get)
    if limiting == "rdma":
        limiting = _send_limit(net.sum(1) * tb, net.sum(1), nic, issue, cc)
    counted = float(sel.sum(1).mean()) * tb
    return KernelTime(fixed + max(terms.values()), counted, "rdma" if p.n_nodes > 1 or not use_nvlink else "nvlink",
                      limiting, terms)
