"""Latency and bandwidth terms of each (algorithm, protocol) for each operation on a placed group.

Each builder returns :class:`Row` objects: the four numbers of the two-regime model
``t(S) = max(lat_small + S*inv_small, lat_big + S*inv_big, lat_small + msgs(S)/rate)`` with S in nccl-tests bytes,
or a reason why the pair cannot run. Formulas follow NCCL src/graph/tuning.cc v2.30.7 (docs/collectives.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from simulator.collectives.coefficients import PROTOCOLS, Coefficients
from simulator.collectives.curves import Curve
from simulator.collectives.links import LinkParams, hw_class, intra_class, nodes_index
from simulator.collectives.placement import GroupPlacement
from simulator.units.constants import GIGA, MICRO


@dataclass(frozen=True)
class Row:
    """One (algorithm, protocol) of one operation: cost terms, or why it is infeasible."""

    algorithm: str
    protocol: str
    lat_small_s: float = 0.0
    inv_small: float = 0.0
    lat_big_s: float = 0.0
    inv_big: float = 0.0
    msgs_fixed: float = 0.0
    msgs_per_byte: float = 0.0
    reason: str = ""
    curve: Curve | None = None  # measured exchange time of curve_wire*S bytes: replaces the two lines
    curve_wire: float = 0.0
    curve_max_bytes: float = math.inf  # beyond it the protocol adds curve_over_inv seconds per byte
    curve_over_inv: float = 0.0
    fill_ops: int = 0  # NVLS all_reduce: channels x heads (concurrentOps); the pipeline fill is nvls_loop_bytes
    fill_inv: float = 0.0  # seconds per byte of that fill


@dataclass(frozen=True)
class Ctx:
    """Everything a builder needs, resolved once per group."""

    p: GroupPlacement
    c: Coefficients
    links: dict[str, dict[str, LinkParams]]
    p2p: dict[str, dict[str, LinkParams]] = field(default_factory=dict)  # point-to-point channels (links.py)

    @property
    def n(self) -> int:
        return self.p.n_ranks

    @property
    def k(self) -> int:
        return self.p.ranks_per_node

    @property
    def nodes(self) -> int:
        return self.p.n_nodes

    def intra(self, proto: str) -> LinkParams | None:
        return self.links[intra_class(self.p)][proto] if self.k > 1 else None

    def net(self, proto: str) -> LinkParams | None:
        return self.links["net"][proto] if self.nodes > 1 else None

    def ring_links(self, proto: str) -> list[LinkParams]:
        return [lk for lk in (self.intra(proto), self.net(proto)) if lk is not None]

    def primary(self, proto: str) -> LinkParams:
        return self.net(proto) or self.intra(proto)

    def p2p_intra(self, proto: str) -> LinkParams | None:
        return self.p2p[intra_class(self.p)][proto] if self.k > 1 else None

    def p2p_net(self, proto: str) -> LinkParams | None:
        return self.p2p["net"][proto] if self.nodes > 1 else None

    def p2p_latency(self, proto: str) -> float:
        """One point-to-point exchange: the calibrated latency of the slowest link class used, else NCCL's ring base
        latency plus one step (hwLat) on it (tuning.cc has no p2p table; p2p runs on the same transports)."""
        link = self.p2p_net(proto) or self.p2p_intra(proto)
        if link.latency_s is not None:
            return link.latency_s
        hw = "net" if self.nodes > 1 else intra_class(self.p)
        return self.c.base_latency_us["ring"][PROTOCOLS.index(proto)] * MICRO + self.step_latency(hw, "ring", proto)

    def step_latency(self, link_class: str, algo: str, proto: str) -> float:
        """NCCL hwLat of one step on a link class (s); the network adds its switch latency (twice for Simple)."""
        i = PROTOCOLS.index(proto)
        lat = self.c.hw_latency_us[hw_class(link_class)][algo][i] * MICRO
        if link_class == "net":
            return lat + self.p.net_latency_s * (2 if proto == "simple" else 1)
        return max(lat, self.p.intra_latency_s)

    def base(self, algo: str, proto: str) -> float:
        return self.c.base_latency_us[algo][PROTOCOLS.index(proto)] * MICRO + self.primary(proto).latency_shift_s


def two_regime(ctx: Ctx, algo: str, proto: str, lat_s: float, wire_small: float, wire_big: float,
               links: list[LinkParams], bw_scale: float = 1.0, cap_Bps: float = math.inf) -> Row:
    """Row from per-rank wire bytes per nccl-tests byte over the bottleneck of ``links`` (scaled and capped)."""
    bottleneck = min(links, key=lambda lk: lk.bandwidth_Bps)
    bw = min(bottleneck.bandwidth_Bps * bw_scale, cap_Bps)
    small_bw = min(min(lk.small_bw_Bps for lk in links) * bw_scale, max(cap_Bps, bw))
    lat_b = bottleneck.fill_latency_s if bottleneck.fill_latency_s is not None else lat_s
    return Row(algo, proto, lat_s, wire_small / small_bw, lat_b, wire_big / bw)


def ring_latency(ctx: Ctx, op: str, proto: str, nsteps: int) -> float:
    """NCCL tuning.cc ring latency: base + intra steps * intraLat + inter steps * interLat."""
    lat = ctx.base("ring", proto)
    if ctx.nodes == 1:
        return lat + nsteps * ctx.step_latency(intra_class(ctx.p), "ring", proto)
    overhead = ctx.c.net_overhead_us[ctx.p.cpu_vendor] * MICRO * (3 if proto == "simple" else 1)
    intra_lat = max(ctx.step_latency(intra_class(ctx.p), "ring", proto), overhead)
    inter_lat = ctx.step_latency("net", "tree" if ctx.k == 1 else "ring", proto)
    n_inter = 2 * (ctx.nodes - 1) if op == "all_reduce" else ctx.nodes - 1
    return lat + (nsteps - n_inter) * intra_lat + n_inter * inter_lat


def ring(ctx: Ctx, op: str, proto: str) -> Row:
    """Ring all_reduce (2(n-1) steps) or all_gather / reduce_scatter (n-1 steps) of S/n bytes each."""
    nsteps = 2 * (ctx.n - 1) if op == "all_reduce" else ctx.n - 1
    slack = ctx.c.ring_pipeline_slack
    lat = ring_latency(ctx, op, proto, nsteps)
    return two_regime(ctx, "ring", proto, lat, nsteps / ctx.n, (nsteps + slack) / ctx.n, ctx.ring_links(proto))


def chain(ctx: Ctx, op: str, proto: str) -> Row:
    """Pipelined broadcast / reduce along the ring (NCCL 'Ring'): every link carries S once, at the link rate (no
    ring slack), after n-1 hops of fill (tuning.cc: baseLat + one hwLat; the further n-2 hops fill the pipeline).

    A calibrated ring's fill latency is not used: it is the intercept of the ring's 4-step chunks (ALLREDUCE_
    CHUNKSTEPS), while a chain moves 1-step chunks (collectives.h BROADCAST_CHUNKSTEPS = SLICESTEPS = 1). Measured on
    2x H200: broadcast's bandwidth-regime intercept is ~13 us against all_reduce's ~24 us.
    """
    hw = "net" if ctx.nodes > 1 else intra_class(ctx.p)
    step = ctx.step_latency(hw, "ring", proto)
    lat = ctx.base("ring", proto) + step
    row = two_regime(ctx, "ring", proto, lat, 1.0, 1.0, ctx.ring_links(proto))
    return Row(row.algorithm, proto, row.lat_small_s, row.inv_small, lat + max(ctx.n - 2, 0) * step, row.inv_big)


def tree(ctx: Ctx, proto: str) -> Row:
    """All_reduce on NCCL's intra-node chain + inter-node double binary tree; algbw = busbw/2 (NCCL, nccl#457)."""
    c, idx = ctx.c, nodes_index(ctx.nodes)
    intra, net = ctx.intra(proto), ctx.net(proto)
    scale = c.tree_efficiency / c.protocol_efficiency[proto]  # undo the ring protocol factor, apply NCCL's tree ones
    if proto == "ll":
        scale *= c.tree_ll_factor
    elif proto == "ll128":
        scale *= c.tree_ll128_factor[0 if ctx.nodes == 1 else 1]
    links = [lk for lk in (intra, net) if lk is not None]
    if net is not None and ctx.nodes == 2:  # two nodes: each NIC carries half ("tree effect", nccl-tests#196)
        links = [lk for lk in links if lk is not net] + [LinkParams(net.link_class, 2 * net.bandwidth_Bps,
                                                                     2 * net.small_bw_Bps, net.latency_shift_s,
                                                                     net.fill_latency_s)]
    channels = (c.intra_channels[intra_class(ctx.p)] // 2) if ctx.nodes == 1 else ctx.p.nics_per_node
    cap = channels * c.per_ch_max_tree_bw_GBps[ctx.p.gpu_arch][idx] * GIGA
    intra_lat = ctx.step_latency(intra_class(ctx.p), "tree", proto)
    inter_lat = ctx.step_latency("net", "tree", proto) if ctx.nodes > 1 else 0.0
    chain = ctx.p.max_ranks_per_node - 1            # the longest intra-node chain (the fullest node's, if uneven)
    lat = ctx.base("tree", proto) + 2 * (chain * intra_lat + math.log2(ctx.nodes) * inter_lat)
    return two_regime(ctx, "tree", proto, lat, 2.0, 2.0, links, bw_scale=scale, cap_Bps=cap)


def nvls_bus_bw(ctx: Ctx, op: str) -> float:
    """NVLS bus bandwidth (Simple): k ranks on the switch, NCCL channel accounting and efficiency.

    NCCL search.cc: the NVLS graph has nCh = min(k, NCCL_MAX_NVLS_ARITY = 32) channels, each headed by a different
    GPU; a head uses 2 bw on its NVSwitch link, every other GPU 1 bw per channel, so the nCh channels share
    B*nCh/(nCh+1); tuning.cc then applies nvlsEfficiency * (nCh-1)/nCh and, for all_reduce, x2 ("AllReduce
    pipelines two operations") or, otherwise, (k-1)/k. Up to 32 ranks nCh = k (every NVSwitch node up to HGX);
    a GB200 NVL72 rack's 72 ranks have 32 channels.
    """
    k = ctx.k
    ch = min(k, ctx.c.nvls_max_arity)
    bw = ctx.links["nvlink"]["simple"].bandwidth_Bps * ch / (ch + 1)
    bw *= ctx.c.nvls_efficiency[ctx.p.gpu_arch] * (ch - 1) / ch
    return bw * 2 if op == "all_reduce" else bw * (k - 1) / k


def nvls_tree_loop_bytes(sizes_bytes, ops: int, max_chunk: int):
    """One NVLS-tree loop: enqueue.cc NCCL_ALGO_NVLS_TREE chunk = min(NCCL_NVLS_CHUNKSIZE, treeMaxChunkSize), then
    256 / 128 / 64 / 32 KiB below 32 / 16 / 4 / 1 x ops x chunk."""
    s = np.asarray(sizes_bytes, dtype=float)
    chunk = np.full(s.shape, float(max_chunk))
    for factor, step in ((32, 262144.0), (16, 131072.0), (4, 65536.0), (1, 32768.0)):
        chunk = np.where((s < factor * ops * chunk) & (chunk > step), step, chunk)
    return ops * chunk


def nvls_loop_bytes(sizes_bytes, ops: int, max_chunk: int):
    """Bytes of one NVLS all_reduce loop over all channels, ops x chunk, with NCCL's chunk for each buffer size.

    NCCL src/enqueue.cc@73cf1122 (v2.30.7) computeCollChunkInfo, NCCL_ALGO_NVLS: chunk = NCCL_NVLS_CHUNKSIZE, then
    64 KiB if nBytes < 64 ops chunk, 32 KiB if nBytes < 8 ops chunk, 16 KiB if nBytes < 2 ops chunk, where
    ops = concurrentOps = nChannels x nHeads.
    """
    s = np.asarray(sizes_bytes, dtype=float)
    chunk = np.full(s.shape, float(max_chunk))
    for factor, step in ((64, 65536.0), (8, 32768.0), (2, 16384.0)):
        chunk = np.where((s < factor * ops * chunk) & (chunk > step), step, chunk)
    return ops * chunk


def nvls(ctx: Ctx, op: str) -> Row:
    """NVLink SHARP inside one node: all_reduce (busbw to algbw with the ring factor) or all_gather/reduce_scatter.

    all_reduce also pays the pipeline's fill and drain, ``nvls_fill_loops`` loops of ``nvls_loop_bytes`` at the
    bus bandwidth: a loop is channels x heads x chunk (24 x 32 x 64 KiB = 48 MiB on a 72-GPU NVL72 domain, 16 x 8 x
    128 KiB = 16 MiB on DGX H100), so at 72 ranks a 512 MiB all_reduce is only 11 loops.
    """
    nvl = ctx.links["nvlink"]["simple"]
    lat = ctx.step_latency("nvlink", "nvls", "simple") + nvl.latency_shift_s
    bus = nvls_bus_bw(ctx, op)
    wire = 2 * (ctx.n - 1) / ctx.n if op == "all_reduce" else 1.0
    link = LinkParams("nvlink", bus, bus * nvl.small_bw_Bps / nvl.bandwidth_Bps, nvl.latency_shift_s, nvl.fill_latency_s)
    row = two_regime(ctx, "nvls", "simple", lat, wire, wire, [link])
    if op != "all_reduce" or nvl.fill_latency_s is not None:  # a calibrated line already holds the measured fill
        return row
    c = ctx.c
    ops = c.nvls_kernel_channels[ctx.p.gpu_arch] * min(ctx.k, c.nvls_max_arity)
    return replace(row, fill_ops=ops, fill_inv=c.nvls_fill_loops * row.inv_big)


def nvls_tree(ctx: Ctx) -> Row:
    """NVLS inside each node + tree across nodes (all_reduce, Simple), NCCL tuning.cc NVLSTree: the bus bandwidth is
    min(NVLS intra, network (x2 on 2 nodes), nCh x perChMaxNVLSTreeBw) with nCh = min(k, 32) NVLS channels."""
    c, idx = ctx.c, nodes_index(ctx.nodes)
    intra = nvls_bus_bw(ctx, "all_reduce")
    net = ctx.net("simple")
    inter = net.bandwidth_Bps * (2 if ctx.nodes == 2 else 1)
    cap = min(ctx.k, c.nvls_max_arity) * c.per_ch_max_nvls_tree_bw_GBps[ctx.p.gpu_arch][idx] * GIGA
    bus = min(intra, inter, cap)
    lat = (ctx.step_latency("nvlink", "nvls_tree", "simple")
           + 2 * math.log2(ctx.nodes) * ctx.step_latency("net", "nvls_tree", "simple") + net.latency_shift_s)
    link = LinkParams("net", bus, bus * net.small_bw_Bps / net.bandwidth_Bps, 0.0, net.fill_latency_s)
    wire = 2 * (ctx.n - 1) / ctx.n
    row = two_regime(ctx, "nvls_tree", "simple", lat, wire, wire, [link])
    if net.fill_latency_s is not None:
        return row
    # the same loops as NVLS, over nvls.cc's multi-node channel count (fill_ops < 0 marks the NVLS-tree chunk rule)
    ops = c.nvls_tree_channels[ctx.p.gpu_arch] * min(ctx.k, c.nvls_max_arity)
    return replace(row, fill_ops=-ops, fill_inv=c.nvls_fill_loops * row.inv_big)


def pat(ctx: Ctx, op: str) -> Row:
    """PAT all_gather / reduce_scatter (one rank per node): ring bytes at 0.75 of the ring bandwidth (NCCL 2.24+)."""
    c = ctx.c
    lat = (ctx.base("pat", "simple") + math.log2(ctx.nodes) * ctx.step_latency("net", "pat", "simple") / 3.5
           + c.pat_latency_per_rank_us * MICRO * ctx.n)
    wire = (ctx.n - 1) / ctx.n
    return two_regime(ctx, "pat", "simple", lat, wire, wire, ctx.ring_links("simple"), bw_scale=c.pat_efficiency)
