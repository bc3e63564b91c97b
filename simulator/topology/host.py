"""The host link of every GPU: its route to the CPU (NUMA domain) of its PCIe complex, shared by the node's GPUs when
all of them copy at once (offload: docs/offload.md).

A GPU reaches host memory through its PCIe complex's root port (the PCIe x16 link to the switch, then the switch's
x16 uplink that the complex's GPUs and NICs share), or over NVLink-C2C on Grace-Blackwell. When every GPU of a node
copies to or from its own NUMA domain at once (every rank of a data-parallel job offloads the same bytes at the same
point of the step), each link of those routes is split evenly among the GPUs that cross it.
"""

from __future__ import annotations

import networkx as nx

from simulator.caching import IdentityCache
from simulator.topology.build import node_template
from simulator.topology.topology import Topology


def _route(graph: nx.DiGraph, gpu: str, cpu: str) -> list[tuple[str, str]]:
    """The widest route from ``gpu`` to ``cpu`` (largest bottleneck, then fewest hops), as its edges."""
    widths = sorted({w for _, _, w in graph.edges(data="bandwidth_Bps")}, reverse=True)
    for width in widths:
        view = nx.subgraph_view(graph, filter_edge=lambda u, v, w=width: graph.edges[u, v]["bandwidth_Bps"] >= w)
        if nx.has_path(view, gpu, cpu):
            hops = nx.shortest_path(view, gpu, cpu)
            return list(zip(hops, hops[1:], strict=False))
    raise ValueError(f"no route from {gpu} to {cpu}")


def host_link_Bps(topology: Topology, gpus: int | None = None) -> float:
    """Per-GPU bandwidth to host memory per direction (B/s, datasheet figures) when the first ``gpus`` GPUs of a node
    (default all: a job's ranks fill nodes in order) copy at once: the slowest GPU's most shared link. PCIe Gen5 x16
    behind a switch with two GPUs per uplink (DGX H100): 63.0 GB/s / 2 = 31.5 GB/s; one GPU alone: 63.0 GB/s;
    NVLink-C2C (GB200): 450 GB/s."""
    node = topology.cluster.node
    return _host_link_of((node,), (min(gpus or node.gpus, node.gpus),))


def _host_link(objects: tuple, values: tuple) -> float:
    node, (active,) = objects[0], values
    graph = node_template(node)
    routes = []
    for complex_ in node.pcie.complexes:
        for g in (g for g in complex_.gpus if g < active):
            routes.append(_route(graph, f"n0.gpu{g}", f"n0.cpu{complex_.numa}"))
    shared: dict[tuple[str, str], int] = {}
    for route in routes:
        for edge in route:
            shared[edge] = shared.get(edge, 0) + 1
    return min(min(graph.edges[e]["bandwidth_Bps"] / shared[e] for e in route) for route in routes)


#: :func:`host_link_Bps` by the identity of the node spec (frozen, but its dict fields make it unhashable)
_host_link_of = IdentityCache(_host_link, maxsize=64)
