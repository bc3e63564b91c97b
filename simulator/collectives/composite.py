"""Hierarchical collectives, all-to-all and point-to-point exchanges, built from the link parameters."""

from __future__ import annotations

from dataclasses import replace

from simulator.collectives.algorithms import Ctx, Row, ring, two_regime
from simulator.collectives.links import LinkParams, intra_class


def _sub(ctx: Ctx, n_ranks: int, ranks_per_node: int, links: dict) -> Ctx:
    return Ctx(ctx.p.with_ranks(n_ranks, ranks_per_node), ctx.c, links)


def _scaled(lk: LinkParams, factor: float) -> LinkParams:
    return replace(lk, bandwidth_Bps=lk.bandwidth_Bps * factor, small_bw_Bps=lk.small_bw_Bps * factor)


def _add(name: str, proto: str, parts: list[tuple[Row, float]]) -> Row:
    """Sequential phases: latencies add, per-byte terms add (each scaled by its share of S)."""
    return Row(name, proto,
               sum(r.lat_small_s for r, _ in parts), sum(r.inv_small * f for r, f in parts),
               sum(r.lat_big_s for r, _ in parts), sum(r.inv_big * f for r, f in parts))


def hierarchical(ctx: Ctx, op: str, proto: str) -> Row:
    """Intra-node reduce-scatter, inter-node ring on S/k per rank (each rank gets 1/k of the node's NICs),
    intra-node all-gather (all_reduce); all_gather / reduce_scatter do the inter-node and intra-node halves."""
    cls = intra_class(ctx.p)
    intra = _sub(ctx, ctx.k, ctx.k, {cls: ctx.links[cls]})
    net_links = {"net": {p: _scaled(lk, 1.0 / ctx.k) for p, lk in ctx.links["net"].items()}}
    inter = _sub(ctx, ctx.nodes, 1, net_links)
    if op == "all_reduce":
        parts = [(ring(intra, "reduce_scatter", proto), 1.0), (ring(inter, "all_reduce", proto), 1.0 / ctx.k),
                 (ring(intra, "all_gather", proto), 1.0)]
    else:
        parts = [(ring(inter, op, proto), 1.0 / ctx.k), (ring(intra, op, proto), 1.0)]
    return _add("hierarchical", proto, parts)


def _rate_terms(ctx: Ctx, peers_per_nic: float, bytes_per_nic_per_byte: float) -> tuple[float, float]:
    """Work requests per NIC: at least one per remote peer, and one per network chunk of data."""
    return peers_per_nic, bytes_per_nic_per_byte / ctx.c.net_chunk_bytes


def _fill(links: list[LinkParams], lat: float) -> float:
    """Bandwidth-regime intercept: the slowest calibrated fill latency, or the latency when uncalibrated."""
    fills = [lk.fill_latency_s for lk in links]
    return max(fills) if all(f is not None for f in fills) else lat


def all_to_all_direct(ctx: Ctx, proto: str) -> Row:
    """Every rank sends S/n to every rank at once over NCCL's p2p channels: NVLink to local peers, the node's NICs
    to remote ones (the S/n a rank sends itself is a local copy, overlapped).

    Time is the slower of the two (they run concurrently); the network part sees fabric oversubscription and, per
    NIC, a message-rate bound (CPU proxy vs IBGDA). sjeaugey (nccl-tests#267): all-to-all does not aggregate NICs
    beyond each rank's own, which is what per-node NIC bandwidth / k per rank means here. At 2 ranks this is one
    sendrecv of S/2 (measured on 2x H200: within 3% of sendrecv at half the bytes for S >= 16 MiB).
    """
    n, k = ctx.n, ctx.k
    rows, links = [], []
    intra = ctx.p2p_intra(proto)
    if intra is not None:
        rows.append(two_regime(ctx, "direct", proto, 0.0, (k - 1) / n, (k - 1) / n, [intra]))
        links.append(intra)
    net = ctx.p2p_net(proto)
    msgs = (0.0, 0.0)
    if net is not None:
        per_node = _scaled(net, 1.0 / ctx.p.fabric_oversubscription)
        wire = k * (n - k) / n  # bytes leaving a node per nccl-tests byte
        rows.append(two_regime(ctx, "direct", proto, 0.0, wire, wire, [per_node]))
        links.append(per_node)
        nics = ctx.p.nics_per_node
        msgs = _rate_terms(ctx, k * (n - k) / nics, wire / nics)
    lat = ctx.p2p_latency(proto)
    inv_s = max(r.inv_small for r in rows)
    inv_b = max(r.inv_big for r in rows)
    row = Row("direct", proto, lat, inv_s, _fill(links, lat), inv_b, msgs[0], msgs[1])
    return _with_curve(row, intra, (k - 1) / n) if net is None else row


def _with_curve(row: Row, link: LinkParams, wire: float) -> Row:
    """A one-node p2p row on a link with a measured curve: one exchange of ``wire * S`` bytes per rank."""
    if link.curve is None:
        return row
    return replace(row, curve=link.curve, curve_wire=wire, curve_max_bytes=link.curve_max_bytes,
                   curve_over_inv=link.curve_over_inv)


def all_to_all_hierarchical(ctx: Ctx, proto: str) -> Row:
    """Two-phase all-to-all (rail aggregation, as DeepEP/PXN): gather the data for each remote node on the GPU that
    shares its rail, one inter-node exchange between rail peers (fewer, larger messages), scatter inside the node."""
    n, k, nodes = ctx.n, ctx.k, ctx.nodes
    intra = ctx.p2p_intra(proto)
    remote = (n - k) / n
    shuffle = two_regime(ctx, "hierarchical", proto, 0.0, remote * (k - 1) / k, remote * (k - 1) / k, [intra])
    per_node = _scaled(ctx.p2p_net(proto), 1.0 / ctx.p.fabric_oversubscription)
    wire = k * remote
    inter = two_regime(ctx, "hierarchical", proto, 0.0, wire, wire, [per_node])
    local = two_regime(ctx, "hierarchical", proto, 0.0, (k - 1) / n, (k - 1) / n, [intra])
    lat = ctx.p2p_latency(proto) + 2 * ctx.step_latency(intra_class(ctx.p), "ring", proto)
    nics = ctx.p.nics_per_node
    msgs = _rate_terms(ctx, k * (nodes - 1) / nics, wire / nics)
    inv_s = 2 * shuffle.inv_small + max(inter.inv_small, local.inv_small)
    inv_b = 2 * shuffle.inv_big + max(inter.inv_big, local.inv_big)
    return Row("hierarchical", proto, lat, inv_s, lat, inv_b, msgs[0], msgs[1])


def sendrecv(ctx: Ctx, proto: str) -> Row:
    """Ring exchange over NCCL's p2p channels: each rank sends S to rank+1 and receives S from rank-1 at once. With
    contiguous ranks one rank per node sends across, over one NIC (NCCL p2p uses the GPU's nearest NIC)."""
    links = []
    if ctx.k > 1:
        links.append(ctx.p2p_intra(proto))
    if ctx.nodes > 1:
        links.append(_scaled(ctx.p2p_net(proto), 1.0 / ctx.p.nics_per_node))
    lat = ctx.p2p_latency(proto)
    row = two_regime(ctx, "direct", proto, lat, 1.0, 1.0, links)
    return _with_curve(row, links[0], 1.0) if ctx.nodes == 1 else row
