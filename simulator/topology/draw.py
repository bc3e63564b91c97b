"""Pictures and exports of a topology: a layered matplotlib drawing and GraphML.

Only the report layer and the CLI call these; matplotlib is imported inside the function so that
``import simulator.topology`` stays light.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from simulator.topology.topology import Topology

#: vertical layer of each vertex kind: fabric on top, then CPUs, PCIe switches, NICs and GPUs, NVSwitches below
LAYERS = {"spine": 8, "leaf": 7, "cpu": 6, "pcie_switch": 4, "nic": 3, "gpu": 2, "nvswitch": 0.5}
LINK_COLOURS = {"nvlink": "#76b900", "pcie": "#1f77b4", "cpu": "#7f7f7f", "upi": "#7f7f7f", "xgmi": "#7f7f7f",
                "c2c": "#2ca02c", "ib": "#d62728", "eth": "#ff7f0e"}
MAX_NODES_DRAWN = 4


def layered_positions(topology: Topology, nodes: list[int]) -> dict[str, tuple[float, float]]:
    """x by node then by index inside the node, y by vertex kind (fabric on top, NVSwitches at the bottom)."""
    graph = topology.graph
    width = max(topology.cluster.node.gpus, 4) + 2
    positions: dict[str, tuple[float, float]] = {}
    for kind in LAYERS:
        for node in nodes:
            members = sorted((v for v, d in graph.nodes(data=True) if d["kind"] == kind and d.get("node") == node),
                             key=_order_key)
            for i, v in enumerate(members):
                x = node * width + (i + 0.5) * (width - 2) / max(len(members), 1)
                y = LAYERS[kind] + (0.8 if graph.nodes[v].get("level") == 1 else 0)
                positions[v] = (x, y)
        fabric = sorted((v for v, d in graph.nodes(data=True) if d["kind"] == kind and d.get("node") is None),
                        key=_order_key)
        span = len(nodes) * width
        for i, v in enumerate(fabric):
            positions[v] = ((i + 0.5) * span / max(len(fabric), 1), LAYERS[kind])
    return positions


def _order_key(vertex: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part
                 for part in vertex.replace(".", " ").replace("gpu", "gpu ").replace("nic", "nic ").split())


def draw(topology: Topology, path: str | Path, *, nodes: int | None = None) -> list[int]:
    """Draw the first ``nodes`` nodes (default: all, at most 4) and the fabric between them into an image file.

    Returns the node indices drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = list(range(min(nodes or topology.cluster.nodes, MAX_NODES_DRAWN, topology.cluster.nodes)))
    keep = [v for v, n in topology.graph.nodes(data="node") if n in shown or n is None]
    graph = topology.graph.subgraph(keep).to_undirected(as_view=False)
    positions = layered_positions(topology, shown)
    figure, axes = plt.subplots(figsize=(max(8, 4 * len(shown) + 4), 6))
    for link, colour in LINK_COLOURS.items():
        edges = [(u, v) for u, v, k in graph.edges(data="link") if k == link]
        if edges:
            widths = [0.5 + 2.5 * graph.edges[e]["bandwidth_Bps"] / 125e9 for e in edges]
            nx.draw_networkx_edges(graph, positions, edgelist=edges, edge_color=colour, width=widths, ax=axes,
                                   alpha=0.6, label=link)
    labels = {v: v.split(".", 1)[-1] for v in graph}
    nx.draw_networkx_nodes(graph, positions, node_size=260, node_color="#f5f5f5", edgecolors="#333333", ax=axes)
    nx.draw_networkx_labels(graph, positions, labels=labels, font_size=6, ax=axes)
    hidden = topology.cluster.nodes - len(shown)
    title = topology.graph.graph.get("name", "topology") + (f" ({hidden} more nodes not drawn)" if hidden else "")
    axes.set_title(title)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="link (width ~ bandwidth)")
    axes.set_axis_off()
    figure.tight_layout()
    figure.savefig(path, dpi=140)
    plt.close(figure)
    return shown


def write_graphml(topology: Topology, path: str | Path) -> None:
    """Export the graph (all vertex and edge attributes) as GraphML."""
    graph = topology.graph.copy()
    for _, data in graph.nodes(data=True):
        for key, value in list(data.items()):
            if value is None:
                del data[key]
    nx.write_graphml(graph, str(path))
