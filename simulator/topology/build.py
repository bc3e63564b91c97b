"""Build the networkx topology graph of a cluster from its hardware spec.

Vertices are typed (``kind``: gpu, nvswitch, pcie_switch, cpu, nic, leaf, spine) and named ``n<node>.<part>``
(``n0.gpu3``, ``n1.nvsw0``, ``n0.pcie2.g``, ``n0.cpu3``, ``n1.nic7``) or ``leaf<j>`` / ``spine<k>``. Every physical
link is a pair of directed edges, each carrying ``bandwidth_Bps`` (per direction), ``latency_s`` and ``link``
(nvlink, pcie, cpu, upi, xgmi, c2c, ib, eth). Bandwidths are datasheet figures; achievable efficiency is the
collective model's business.

The unit that repeats is the NVLink domain: one node, or (``nvlink_domain`` in the node profile) the consecutive
nodes that share NVSwitches, whose switch chips are then vertices of the domain, ``d<domain>.nvsw<i>`` (a GB200
NVL72 rack: 18 trays whose 72 GPUs each link to the rack's 18 switch chips). Domain 0 is built once
(:func:`domain_template`) and every other domain is a relabelled copy; the fabric joins the nodes' NICs.
"""

from __future__ import annotations

import math
import re

import networkx as nx

from simulator.hardware import ClusterSpec, FabricSpec, NodeSpec, pcie_bandwidth_Bps

UPSTREAM_LANES = 16  # PCIe switch uplinks and CPU root ports are x16 on every shipped platform


def node_template(spec: NodeSpec) -> nx.DiGraph:
    """Node 0 alone (vertices ``n0.*``), with its own NVSwitches (a domain of one node)."""
    template = nx.DiGraph()
    _add_node(template, spec, 0, own_switches=True)
    return template


def domain_template(cluster: ClusterSpec) -> nx.DiGraph:
    """NVLink domain 0: nodes ``n0 .. n<D-1>`` and, when the domain spans nodes, its shared switches ``d0.nvsw<i>``.
    Every domain of the cluster is a relabelled copy of it (:func:`relabel_vertex`)."""
    spec, size = cluster.node, cluster.domain_nodes
    if size == 1:
        return node_template(spec)
    template = nx.DiGraph()
    for node in range(size):
        _add_node(template, spec, node, own_switches=False)
    _add_domain_switches(template, spec, size)
    return template


def relabel_vertex(vertex: str, domain: int, domain_nodes: int) -> str:
    """A vertex of domain 0's template as the same vertex of ``domain`` (``n3.gpu1`` -> ``n21.gpu1``,
    ``d0.nvsw4`` -> ``d1.nvsw4`` with 18 nodes per domain)."""
    if domain == 0:
        return vertex
    head, rest = vertex.split(".", 1)
    if head[0] == "d":
        return f"d{domain}.{rest}"
    return f"n{int(head[1:]) + domain * domain_nodes}.{rest}"


def fabric_graph(cluster: ClusterSpec) -> nx.DiGraph:
    """The network alone: NICs (by name), leaves and spines with their links (empty for one node)."""
    graph = nx.DiGraph()
    if cluster.nodes > 1:
        _add_fabric(graph, cluster.node, cluster.nodes, cluster.effective_fabric)
    return graph


def build_graph(cluster: ClusterSpec, template: nx.DiGraph | None = None,
                fabric: nx.DiGraph | None = None) -> nx.DiGraph:
    """The whole cluster as a directed graph (see module docstring for names and attributes)."""
    graph = nx.DiGraph(name=f"{cluster.nodes}x {cluster.node.name}")
    template = template if template is not None else domain_template(cluster)
    size = cluster.domain_nodes
    for domain in range(cluster.domains):  # every domain is a relabelled copy of domain 0 (bulk adds: large clusters)
        names = {v: relabel_vertex(v, domain, size) for v in template}
        graph.add_nodes_from((names[v], _shifted(data, domain, size)) for v, data in template.nodes(data=True))
        graph.add_edges_from((names[u], names[v], data) for u, v, data in template.edges(data=True))
    fabric = fabric if fabric is not None else fabric_graph(cluster)
    graph.add_nodes_from((v, data) for v, data in fabric.nodes(data=True) if "kind" in data)
    graph.add_edges_from(fabric.edges(data=True))
    return graph


def _shifted(data: dict, domain: int, domain_nodes: int) -> dict:
    """Vertex attributes of a copy in ``domain``: its node index (or, for shared switches, its domain) moved."""
    if data.get("node") is not None:
        return {**data, "node": data["node"] + domain * domain_nodes}
    return {**data, "domain": domain}


def _link(graph: nx.DiGraph, a: str, b: str, bandwidth_Bps: float, latency_s: float, link: str) -> None:
    for u, v in ((a, b), (b, a)):
        graph.add_edge(u, v, bandwidth_Bps=float(bandwidth_Bps), latency_s=float(latency_s), link=link)


def _add_node(graph: nx.DiGraph, spec: NodeSpec, node: int, *, own_switches: bool) -> None:
    p = f"n{node}."
    for i in range(spec.gpus):
        graph.add_node(f"{p}gpu{i}", kind="gpu", node=node, index=i)
    _add_nvlink(graph, spec, p, own_switches)
    _add_cpus(graph, spec, node)
    _add_pcie(graph, spec, node)
    _add_c2c(graph, spec, node)


def _add_domain_switches(graph: nx.DiGraph, spec: NodeSpec, nodes: int) -> None:
    """The switch chips shared by the ``nodes`` nodes of domain 0: every GPU of every node links to each of them."""
    nvlink, switch = spec.gpu.nvlink, spec.nvswitch
    for s, links in enumerate(switch.links_per_gpu):
        name = f"d0.nvsw{s}"
        graph.add_node(name, kind="nvswitch", node=None, domain=0, index=s, nvls=switch.nvls,
                       generation=switch.generation)
        for node in range(nodes):
            for i in range(spec.gpus):
                _link(graph, f"n{node}.gpu{i}", name, links * nvlink.bandwidth_per_link, spec.latency.nvlink_hop,
                      "nvlink")


def _add_c2c(graph: nx.DiGraph, spec: NodeSpec, node: int) -> None:
    """NVLink-C2C between each GPU and the CPU of its PCIe complex (Grace Blackwell)."""
    if spec.c2c is None:
        return
    p = f"n{node}."
    for complex_ in spec.pcie.complexes:
        for g in complex_.gpus:
            _link(graph, f"{p}gpu{g}", f"{p}cpu{complex_.numa}", spec.c2c.bandwidth, spec.latency.cpu_hop, "c2c")


def _add_nvlink(graph: nx.DiGraph, spec: NodeSpec, p: str, own_switches: bool) -> None:
    nvlink = spec.gpu.nvlink
    if spec.nvswitch is not None and nvlink is not None and own_switches:
        for s, links in enumerate(spec.nvswitch.links_per_gpu):
            name = f"{p}nvsw{s}"
            graph.add_node(name, kind="nvswitch", node=int(p[1:-1]), index=s, nvls=spec.nvswitch.nvls,
                           generation=spec.nvswitch.generation)
            for i in range(spec.gpus):
                _link(graph, f"{p}gpu{i}", name, links * nvlink.bandwidth_per_link, spec.latency.nvlink_hop,
                      "nvlink")
    for bridge in spec.nvlink_bridges:
        a, b = bridge.gpus
        _link(graph, f"{p}gpu{a}", f"{p}gpu{b}", bridge.links * nvlink.bandwidth_per_link,
              spec.latency.nvlink_hop, "nvlink")


def _add_cpus(graph: nx.DiGraph, spec: NodeSpec, node: int) -> None:
    cpu = spec.cpu
    p = f"n{node}."
    for d in range(cpu.numa_domains):
        graph.add_node(f"{p}cpu{d}", kind="cpu", node=node, index=d, socket=d // cpu.numa_per_socket)
    for socket in range(cpu.sockets):
        domains = range(socket * cpu.numa_per_socket, (socket + 1) * cpu.numa_per_socket)
        for a in domains:
            for b in domains:
                if a < b:
                    _link(graph, f"{p}cpu{a}", f"{p}cpu{b}", cpu.numa_link_bandwidth, spec.latency.cpu_hop, "cpu")
    firsts = [s * cpu.numa_per_socket for s in range(cpu.sockets)]
    for i, a in enumerate(firsts):
        for b in firsts[i + 1:]:
            _link(graph, f"{p}cpu{a}", f"{p}cpu{b}", cpu.socket_link_bandwidth, spec.latency.cpu_hop,
                  cpu.socket_link)


def _add_pcie(graph: nx.DiGraph, spec: NodeSpec, node: int) -> None:
    """PCIe complexes: 0 levels = root ports; 1 = one switch; 2 = an upstream switch over a GPU-side and a
    NIC-side switch (DGX A100, where nvidia-smi reports GPU-NIC as PXB)."""
    p = f"n{node}."
    pcie = spec.pcie
    hop = spec.latency.pcie_hop
    gpu_bw = pcie_bandwidth_Bps(min(pcie.generation, spec.gpu.pcie.generation), spec.gpu.pcie.lanes)
    up_bw = pcie_bandwidth_Bps(pcie.generation, UPSTREAM_LANES)
    for c, complex_ in enumerate(pcie.complexes):
        cpu = f"{p}cpu{complex_.numa}"
        if pcie.switch_levels == 0:
            gpu_parent = nic_parent = cpu
        else:
            top = f"{p}pcie{c}"
            graph.add_node(top, kind="pcie_switch", node=node, index=c, level=1)
            _link(graph, top, cpu, up_bw, spec.latency.cpu_hop, "pcie")
            gpu_parent = nic_parent = top
            if pcie.switch_levels == 2:
                gpu_parent, nic_parent = f"{top}.g", f"{top}.n"
                for side, below in ((gpu_parent, len(complex_.gpus)), (nic_parent, len(complex_.nics))):
                    graph.add_node(side, kind="pcie_switch", node=node, index=c, level=2)
                    # switch-to-switch uplinks assumed non-blocking (as wide as the devices below): DGX A100 runs
                    # all 8 GPU-NIC pairs at HDR line rate at once (nccl-tests 16-rank all_reduce ~192 GB/s busbw)
                    _link(graph, side, top, up_bw * max(below, 1), hop, "pcie")
        for g in complex_.gpus:
            _link(graph, f"{p}gpu{g}", gpu_parent, gpu_bw, hop, "pcie")
            graph.nodes[f"{p}gpu{g}"]["numa"] = complex_.numa
        for n in complex_.nics:
            name = f"{p}nic{n}"
            graph.add_node(name, kind="nic", node=node, index=n, numa=complex_.numa)
            nic_bw = pcie_bandwidth_Bps(pcie.generation, spec.nics.pcie_lanes)
            _link(graph, name, nic_parent, nic_bw, hop, "pcie")


def fabric_layout(spec: NodeSpec, nodes: int, fabric: FabricSpec) -> tuple[int, int, int]:
    """(nodes per leaf group, leaves, spines) of the two-level Clos.

    A leaf gives ``leaf_ports * r / (r + 1)`` ports to NICs and the rest up, for oversubscription r. fat_tree puts all
    NICs of a node on one leaf; rail_optimized gives each rail (NIC index) its own leaf in every group of nodes.
    Spines are logical: one per leaf up-link, each standing for a core tier if the real fabric has three levels.
    """
    r = fabric.oversubscription
    down = max(1, int(fabric.leaf_ports * r / (r + 1)))
    nics = spec.nics.count
    if fabric.kind == "fat_tree":
        per_leaf = max(1, down // nics)
        leaves = math.ceil(nodes / per_leaf)
        used_down = min(per_leaf, nodes) * nics
    else:
        per_leaf = down
        leaves = math.ceil(nodes / per_leaf) * nics
        used_down = min(per_leaf, nodes)
    spines = 0 if leaves == 1 else max(1, math.ceil(used_down / r))
    return per_leaf, leaves, spines


def _add_fabric(graph: nx.DiGraph, spec: NodeSpec, nodes: int, fabric: FabricSpec) -> None:
    per_leaf, leaves, spines = fabric_layout(spec, nodes, fabric)
    for j in range(leaves):
        graph.add_node(f"leaf{j}", kind="leaf", index=j)
    for k in range(spines):
        graph.add_node(f"spine{k}", kind="spine", index=k)
    to_leaf, to_spine = _fabric_link(spec, fabric, "nic"), _fabric_link(spec, fabric, "leaf")
    edges = []  # both directions of each link (as _link adds them), added at once: 10^5 edges on large clusters
    for node in range(nodes):
        for i in range(spec.nics.count):
            a, b = f"n{node}.nic{i}", f"leaf{leaf_of(fabric.kind, node, i, per_leaf, spec.nics.count)}"
            edges += [(a, b, to_leaf), (b, a, to_leaf)]
    for j in range(leaves):
        for k in range(spines):
            edges += [(f"leaf{j}", f"spine{k}", to_spine), (f"spine{k}", f"leaf{j}", to_spine)]
    graph.add_edges_from(edges)  # each edge gets its own copy of the attributes


def _fabric_link(spec: NodeSpec, fabric: FabricSpec, lower: str) -> dict:
    """Attributes of a fabric link (either direction) whose lower end is a ``nic`` (NIC - leaf) or a ``leaf`` (leaf
    - spine): the NIC's line rate on both; a NIC hop adds the NIC's latency to the switch's."""
    latency = spec.latency.nic + fabric.switch_latency if lower == "nic" else fabric.switch_latency
    return {"bandwidth_Bps": float(spec.nics.bandwidth), "latency_s": float(latency), "link": spec.nics.kind}


def fabric_edge(cluster: ClusterSpec, u: str, v: str) -> dict:
    """Attributes of the fabric edge u -> v (``n<node>.nic<i>``, ``leaf<j>``, ``spine<k>``) without building the
    fabric graph (:func:`fabric_graph` holds the same edges); KeyError if the fabric has no such edge."""
    spec, fabric = cluster.node, cluster.effective_fabric
    per_leaf, leaves, spines = fabric_layout(spec, cluster.nodes, fabric)
    ends = {_FABRIC_VERTEX.fullmatch(x).lastgroup if _FABRIC_VERTEX.fullmatch(x) else None: x for x in (u, v)}
    if cluster.nodes > 1 and set(ends) == {"nic", "leaf"}:
        node, nic = (int(x) for x in ends["nic"][1:].split(".nic"))
        if node < cluster.nodes and nic < spec.nics.count and int(ends["leaf"][4:]) == leaf_of(
                fabric.kind, node, nic, per_leaf, spec.nics.count):
            return _fabric_link(spec, fabric, "nic")
    if cluster.nodes > 1 and set(ends) == {"leaf", "spine"}:
        if int(ends["leaf"][4:]) < leaves and int(ends["spine"][5:]) < spines:
            return _fabric_link(spec, fabric, "leaf")
    raise KeyError((u, v))


#: the fabric's vertex names, by kind
_FABRIC_VERTEX = re.compile(r"(?P<nic>n\d+\.nic\d+)|(?P<leaf>leaf\d+)|(?P<spine>spine\d+)")


def leaf_of(kind: str, node: int, nic: int, per_leaf: int, nics_per_node: int) -> int:
    """Leaf switch index that NIC ``nic`` of ``node`` plugs into."""
    group = node // per_leaf
    return group if kind == "fat_tree" else group * nics_per_node + nic
