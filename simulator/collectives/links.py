"""Effective per-rank link parameters of a placed group, per protocol, with a calibration overlaid.

Each link class gets, per protocol: the bandwidth of the bandwidth regime, the bandwidth of the latency regime,
a shift of NCCL's base latency and (when calibrated) the fill latency of the bandwidth regime. Two tables: the
collective channels (:func:`link_table`) and the point-to-point channels (:func:`p2p_link_table`, sendrecv and
all_to_all), each overlaid by the calibration entries of its own path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.collectives.coefficients import PROTOCOLS, Coefficients
from simulator.collectives.curves import Curve
from simulator.collectives.placement import GroupPlacement
from simulator.hardware.calibration import Calibration
from simulator.units.constants import GIGA, MICRO


@dataclass(frozen=True)
class LinkParams:
    """One link class at one protocol. ``fill_latency_s`` is None when uncalibrated (one straight line)."""

    link_class: str
    bandwidth_Bps: float
    small_bw_Bps: float
    latency_shift_s: float
    fill_latency_s: float | None
    latency_s: float | None = None  # p2p, calibrated: the whole latency of one exchange (replaces NCCL's terms)
    curve: Curve | None = None  # p2p, calibrated with measured points: time of one exchange vs bytes
    curve_max_bytes: float = math.inf  # the curve describes this protocol up to this many bytes per exchange
    curve_over_inv: float = 0.0  # seconds per byte this protocol adds to the curve beyond curve_max_bytes


def nodes_index(n_nodes: int) -> int:
    """NCCL's index2: 0 for one node, 1 for two, 2 for more (tuning.cc)."""
    return 0 if n_nodes <= 1 else (1 if n_nodes == 2 else 2)


def intra_class(placement: GroupPlacement) -> str:
    return placement.intra_transport


def hw_class(link_class: str) -> str:
    """NCCL's hwLat row for a link class: NVLINK, PCI (PCIe P2P and SHM) or NET."""
    return {"nvlink": "nvlink", "pcie_p2p": "pci", "shm": "pci", "net": "net"}[link_class]


def intra_bandwidth(placement: GroupPlacement, c: Coefficients) -> float:
    """Datasheet intra-node bandwidth times the transport's efficiency (Simple protocol), bytes/s."""
    if placement.intra_transport == "nvlink":
        return placement.intra_bw_Bps * c.nvlink_efficiency[placement.gpu_arch]
    if placement.intra_transport == "pcie_p2p":
        return placement.intra_bw_Bps * c.pcie_p2p_efficiency
    return placement.intra_bw_Bps * c.shm_efficiency


def net_node_bandwidth(placement: GroupPlacement, c: Coefficients) -> float:
    """Bytes/s one node's ranks of this group can push into the network (Simple protocol).

    min(NIC line rate * efficiency, PCIe GPU<->NIC * NCCL's PCIe factor) per NIC, times the NICs, divided among the
    groups sharing them, capped by channels * per-channel throughput.
    """
    if placement.nics_per_node == 0:
        return 0.0
    per_nic = min(placement.nic_bw_Bps * c.nic_efficiency,
                  (placement.pcie_bw_Bps or placement.nic_bw_Bps) * c.pcie_nic_efficiency)
    channels = c.net_channels_per_nic * placement.nics_per_node
    total = min(per_nic * placement.nics_per_node, channels * c.net_channel_bw_Bps)
    return total / placement.nic_sharing


def _datasheet(link_class: str, bw_simple: float, proto: str, placement: GroupPlacement, c: Coefficients) -> float:
    bw = bw_simple * c.protocol_efficiency[proto]
    if proto == "ll":
        bw = min(bw, c.ll_max_bw_GBps[placement.gpu_arch][nodes_index(placement.n_nodes)] * GIGA)
    return bw


def link_table(placement: GroupPlacement, c: Coefficients, calibration: Calibration | None) -> dict[str, dict[str, LinkParams]]:
    """``{link_class: {protocol: LinkParams}}`` for the classes this group uses (intra and, multi-node, net)."""
    classes = {intra_class(placement): intra_bandwidth(placement, c)}
    if placement.n_nodes > 1:
        classes["net"] = net_node_bandwidth(placement, c)
    table: dict[str, dict[str, LinkParams]] = {}
    for cls, bw_simple in classes.items():
        row = {}
        for i, proto in enumerate(PROTOCOLS):
            bw = _datasheet(cls, bw_simple, proto, placement, c)
            entry = calibration.lookup(cls, proto) if calibration else None
            if entry is None:
                row[proto] = LinkParams(cls, bw, bw, 0.0, None)
                continue
            nccl_ring_base = c.base_latency_us["ring"][i] * MICRO
            scale = 1.0 / placement.nic_sharing if cls == "net" else 1.0
            row[proto] = LinkParams(cls, entry.bandwidth_Bps * scale, entry.small_bw_Bps * scale,
                                    entry.latency_s - nccl_ring_base, entry.fill_latency_s)
        table[cls] = row
    return table


def p2p_link_table(placement: GroupPlacement, c: Coefficients,
                   calibration: Calibration | None) -> dict[str, dict[str, LinkParams]]:
    """``{link_class: {protocol: LinkParams}}`` of NCCL's point-to-point channels (sendrecv, all_to_all).

    Uncalibrated: the datasheet link at the protocol, intra-node times ``p2p_efficiency`` (li-plus 8x A100
    sendrecv), the network as for collectives. Calibrated (``path: p2p`` entries only; a collective fit says
    nothing about p2p channels): the fitted parameters, with ``latency_s`` the whole latency of one exchange. An
    ``auto`` entry describes NCCL's own protocol choice (LL up to NCCL_P2P_LL_THRESHOLD, Simple above: NCCL_PROTO
    does not apply to p2p); its LL row keeps the latency and gets LL's share of the bandwidth, and its measured
    curve (if any) up to the LL threshold and, above it, the curve plus LL's extra per-byte cost (8 B of data per
    16 B line), so that the model picks LL for small messages and Simple for large ones, as NCCL does.
    """
    datasheet = link_table(placement, c, None)
    table: dict[str, dict[str, LinkParams]] = {}
    for cls, row in datasheet.items():
        scale = 1.0 / placement.nic_sharing if cls == "net" else 1.0
        eff = 1.0 if cls == "net" else c.p2p_efficiency
        out = {}
        for proto, lk in row.items():
            entry = calibration.lookup(cls, proto, "p2p") if calibration else None
            if entry is None:
                out[proto] = LinkParams(cls, lk.bandwidth_Bps * eff, lk.small_bw_Bps * eff, 0.0, None)
                continue
            bw, curve_max, over = entry.bandwidth_Bps * scale, math.inf, 0.0
            if entry.protocol == "auto" and proto != "simple":
                ratio = c.protocol_efficiency[proto] / c.protocol_efficiency["simple"]
                curve_max, over = c.p2p_ll_threshold_bytes, (1.0 / ratio - 1.0) / bw
                bw *= ratio
            curve = Curve.from_points(entry.curve) if entry.curve and cls != "net" else None
            out[proto] = LinkParams(cls, bw, entry.small_bw_Bps * scale, 0.0, entry.fill_latency_s, entry.latency_s,
                                    curve, curve_max, over)
        table[cls] = out
    return table
