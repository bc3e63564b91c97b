"""The :class:`Topology`: a cluster's graph and the questions the rest of the simulator asks of it."""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from simulator.errors import UserError
from simulator.hardware import ClusterSpec
from simulator.topology import build
from simulator.topology.build import build_graph, domain_template, fabric_graph, relabel_vertex

#: vertex names inside a node: ``n<node>.<kind><index>...`` (``n3.gpu5``, ``n0.nic1``, ``n2.pcie0.g``)
_VERTEX = re.compile(r"^n(\d+)\.([a-z_]+?)(\d+)")
#: switch chips shared by the nodes of a multi-node NVLink domain: ``d<domain>.nvsw<i>``
_DOMAIN_VERTEX = re.compile(r"^d(\d+)\.")
_GPU = re.compile(r"n(\d+)\.gpu(\d+)")
#: link types that count as each transport
NVLINK = frozenset({"nvlink"})
NETWORK = frozenset({"ib", "eth"})


@dataclass(frozen=True)
class Path:
    """One route between two vertices.

    Attributes:
        hops: vertex names from source to destination.
        links: link type of each edge (len(hops) - 1).
        bottleneck_Bps: smallest per-direction bandwidth on the route, B/s.
        latency_s: sum of the edges' latencies, s.
        transport: how a GPU pair would move data on it: ``nvlink`` (P2P over NVLink), ``pcie_p2p``, ``shm``
            (staged through host memory: the GPUs cannot do P2P over PCIe), or ``network`` (GPUDirect RDMA).
    """

    hops: tuple[str, ...]
    links: tuple[str, ...]
    bottleneck_Bps: float
    latency_s: float
    transport: str

    @property
    def edges(self) -> list[tuple[str, str]]:
        return list(zip(self.hops, self.hops[1:], strict=False))

#: views by their GPUs kept per topology (:meth:`Topology.with_ranks_on`); emptied when this many
_RANK_VIEWS_MAX = 4096


class Topology:
    """A cluster as a networkx graph, with path, bandwidth and link-sharing queries.

    GPUs are addressed by vertex name (``n1.gpu3``) or global rank index (node-major: rank 11 is ``n1.gpu3`` on
    8-GPU nodes). The NVLink domain (the node, or the nodes sharing NVSwitches: a GB200 NVL72 rack) is what repeats:
    paths inside a domain are answered on domain 0's template, paths between domains through the NICs and fabric.
    """

    uneven_groups: bool = False
    """Whether :func:`simulator.collectives.place_group` prices a group spread unevenly over NVLink domains on its
    real split (NCCL's rule: the fewest ranks on one domain set the channels and bandwidths) instead of refusing it.
    Off for plans (a regular plan's groups are even; an uneven one is a layout mistake worth an error); the
    multimodal layer's views turn it on (a submodule may take part of a node: simulator/multimodal/placement.py)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self._domain_nodes = cluster.domain_nodes
        self._template = domain_template(cluster)
        self._path_cache: dict[tuple[str, str], list[Path]] = {}
        self.placement_cache: dict[tuple, object] = {}
        """Placements of groups on this topology (:func:`simulator.collectives.place_group`), by its arguments; a
        view with other ranks (:meth:`with_ranks_on`) or rules (:meth:`on_real_split`) starts an empty one."""
        self.flow_cache: dict[tuple, float] = {}
        """Max-flows inside one NVLink domain (domain 0's template), by their arguments; shared by views."""
        self._rank_views: dict[tuple[int, ...], Topology] = {}
        """:meth:`with_ranks_on`'s views by their GPUs (a view's indices are its own ranks: each view starts empty)."""

    def _view(self, **changes) -> Topology:
        """A shallow copy that shares the graph, the domain template and the path cache, with ``changes`` applied
        and the caches that depend on which GPU holds which rank (placements, the real-split view) left behind."""
        view = copy.copy(self)
        view.__dict__ = {k: v for k, v in self.__dict__.items() if k != "_real_split"}
        view.__dict__.update(changes, placement_cache={}, _rank_views={})
        return view

    def on_real_split(self) -> Topology:
        """This topology, on which :func:`simulator.collectives.place_group` prices a group spread unevenly over
        NVLink domains on its real split (:attr:`uneven_groups`: the domain holding the fewest of its GPUs sets the
        ring's channels and NIC share, NCCL's min over ranks; the ring's steps, latency and bytes are the real
        group's). Built once per topology."""
        if self.uneven_groups:
            return self
        if "_real_split" not in self.__dict__:
            self.__dict__["_real_split"] = self._view(uneven_groups=True)
        return self.__dict__["_real_split"]

    def with_ranks_on(self, gpus: tuple[int, ...]) -> Topology:
        """This topology with rank r on GPU ``gpus[r]`` (a submodule of a multimodal plan on its own GPUs: the
        engine places a plan's rank r on ``gpus[r]``); groups spread unevenly over domains are priced on their real
        split. Built once per ``gpus`` and kept, so a plan search that prices a submodule on the same GPUs again reuses
        the view's placements (each view starts an empty placement cache)."""
        views = self._rank_views
        view = views.get(gpus)
        if view is None:
            if len(views) >= _RANK_VIEWS_MAX:
                views.clear()
            names = self.gpus
            view = views[gpus] = self._view(gpus=[names[g] for g in gpus], uneven_groups=True)
        return view

    @cached_property
    def _fabric(self) -> nx.DiGraph:
        """The network's graph, built on first use (:attr:`graph`): routes and edges across domains are answered from
        the fabric's layout (:meth:`_fabric_route`, :func:`simulator.topology.build.fabric_edge`)."""
        return fabric_graph(self.cluster)

    @cached_property
    def _layout(self) -> tuple[int, int, int]:
        """(nodes per leaf group, leaves, spines) of the fabric (:func:`simulator.topology.build.fabric_layout`)."""
        return build.fabric_layout(self.cluster.node, self.cluster.nodes, self.cluster.effective_fabric)

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The whole cluster, built on first use. Paths, NICs and placements are answered from domain 0's template and
        the fabric alone (every NVLink domain is a copy of domain 0), so a large cluster's full graph is built only
        for the queries that need it (max-flow across domains, NVLink domains, drawings, GraphML)."""
        return build_graph(self.cluster, self._template, self._fabric)

    # ---- naming -------------------------------------------------------------------------------------------------
    @cached_property
    def gpus(self) -> list[str]:
        """All GPU vertices in global rank order."""
        return [f"n{n}.gpu{i}" for n in range(self.cluster.nodes) for i in range(self.cluster.node.gpus)]

    def gpu(self, ref: int | str) -> str:
        """Vertex name of a GPU given as a global index, ``gpu9`` (global) or ``n1.gpu1``."""
        if isinstance(ref, str):
            match = _GPU.fullmatch(ref)
            if match and int(match.group(1)) < self.cluster.nodes and int(match.group(2)) < self.cluster.node.gpus:
                return ref
        text = str(ref)
        index = text.removeprefix("gpu")
        if index.isdigit() and int(index) < len(self.gpus):
            return self.gpus[int(index)]
        raise UserError(f"unknown GPU {ref!r}: this system has {len(self.gpus)} GPUs "
                        f"(gpu0..gpu{len(self.gpus) - 1}, or n<node>.gpu<i>)")

    def node_of(self, vertex: str) -> int | None:
        """Node index of a vertex (None for fabric switches and a domain's shared NVSwitches)."""
        match = _VERTEX.match(vertex)
        return int(match.group(1)) if match else None

    def domain_of(self, vertex: str) -> int | None:
        """NVLink domain of a vertex: its node's domain, a shared switch's own (None for fabric switches)."""
        node = self.node_of(vertex)
        if node is not None:
            return node // self._domain_nodes
        match = _DOMAIN_VERTEX.match(vertex)
        return int(match.group(1)) if match else None

    def gpus_of_domain(self, domain: int) -> list[str]:
        """GPUs of one NVLink domain, node by node (by name, so a view with its ranks reordered gets the same)."""
        first = domain * self._domain_nodes
        return [g for node in range(first, first + self._domain_nodes) for g in self.gpus_of_node(node)]

    def to_template(self, vertex: str) -> str:
        """The vertex's counterpart in domain 0's template (``n21.gpu1`` -> ``n3.gpu1`` with 18 nodes per domain)."""
        domain = self.domain_of(vertex)
        if not domain:
            return vertex
        head, rest = vertex.split(".", 1)
        if head[0] == "d":
            return f"d0.{rest}"
        return f"n{int(head[1:]) - domain * self._domain_nodes}.{rest}"

    def from_template(self, vertex: str, domain: int) -> str:
        """A template vertex as the same vertex of ``domain``."""
        return relabel_vertex(vertex, domain, self._domain_nodes)

    def gpus_of_node(self, node: int) -> list[str]:
        return [f"n{node}.gpu{i}" for i in range(self.cluster.node.gpus)]

    def nics_of_node(self, node: int) -> list[str]:
        count = self.cluster.node.nics.count if self.cluster.node.nics else 0
        return [f"n{node}.nic{i}" for i in range(count)]

    def vertices_of_kind(self, kind: str) -> list[str]:
        return [v for v, k in self.graph.nodes(data="kind") if k == kind]

    # ---- paths --------------------------------------------------------------------------------------------------
    def paths(self, a: int | str, b: int | str) -> list[Path]:
        """All equally good routes from GPU ``a`` to GPU ``b``: over NVLink when it connects them, the widest
        (largest bottleneck) routes, and among those the lowest-latency ones. Inside an NVLink domain this finds, e.g.,
        the six parallel NVSwitch planes of a DGX A100 pair, or the 18 switch chips between two trays of a GB200 NVL72
        rack; across domains the GPUDirect RDMA route through each GPU's nearest NIC (same index as the GPU where
        counts match, as NCCL pairs them)."""
        a, b = self.gpu(a), self.gpu(b)
        if a == b:
            raise UserError(f"a path needs two different GPUs, got {a} twice")
        da, db = self.domain_of(a), self.domain_of(b)
        if da == db:
            local = self._intra_paths(self.to_template(a), self.to_template(b))
            return [self._relabel(p, da) for p in local]
        return self._inter_paths(a, b)

    def path(self, a: int | str, b: int | str) -> Path:
        """The preferred route (first of :meth:`paths`)."""
        return self.paths(a, b)[0]

    def _intra_paths(self, a: str, b: str) -> list[Path]:
        """Inside a domain (template names) NVLink wins whenever it connects the pair (as NCCL's P2P transport
        prefers it), even when one switch plane is narrower than the PCIe route (HGX H800: 2 links = 50 GB/s per
        plane); only a pair with no NVLink route falls back to PCIe/CPU routes."""
        key = (a, b)
        if key not in self._path_cache:
            nvlink = self._node0_nvlink_view
            view = nvlink if a in nvlink and b in nvlink and nx.has_path(nvlink, a, b) else self._node0_view
            self._path_cache[key] = _widest_then_fastest(view, a, b, self._transport_of)
        return self._path_cache[key]

    @cached_property
    def _node0_nvlink_view(self) -> nx.DiGraph:
        view = self._node0_view
        return view.edge_subgraph([(u, v) for u, v, k in view.edges(data="link") if k in NVLINK])

    @property
    def _node0_view(self) -> nx.DiGraph:
        return self._template

    def domain_graph(self) -> nx.DiGraph:
        """Domain 0's graph (do not modify it): one node, or the nodes sharing NVSwitches with their switches; every
        domain is a copy of it (:meth:`to_template`, :meth:`from_template`)."""
        return self._template

    def node_graph(self, node: int = 0) -> nx.DiGraph:
        """The subgraph of one node (do not modify it); on a multi-node NVLink domain it leaves out the shared
        switches."""
        if node == 0 and self._domain_nodes == 1:
            return self._template
        return self.graph.subgraph([v for v, n in self.graph.nodes(data="node") if n == node])

    def edge(self, u: str, v: str) -> dict:
        """Attributes of the directed edge u -> v (from domain 0's template or the fabric; no full graph needed)."""
        du, dv = self.domain_of(u), self.domain_of(v)
        if du is not None and du == dv:
            return self._template.edges[self.to_template(u), self.to_template(v)]
        return build.fabric_edge(self.cluster, u, v)

    def _relabel(self, path: Path, domain: int) -> Path:
        if domain == 0:
            return path
        hops = tuple(self.from_template(h, domain) for h in path.hops)
        return Path(hops, path.links, path.bottleneck_Bps, path.latency_s, path.transport)

    def home_nic(self, gpu: str) -> str:
        """The NIC a GPU uses for network traffic: same local index when NIC and GPU counts match, else the first NIC
        of the GPU's PCIe complex (closest by PCIe hops)."""
        node, local = self.node_of(gpu), int(gpu.rsplit("gpu", 1)[1])
        spec = self.cluster.node
        if spec.nics is None:
            raise UserError(f"node profile {spec.name} has no NICs: GPUs in different nodes cannot communicate")
        if spec.nics.count == spec.gpus:
            return f"n{node}.nic{local}"
        for complex_ in spec.pcie.complexes:
            if local in complex_.gpus and complex_.nics:
                return f"n{node}.nic{complex_.nics[0]}"
        return f"n{node}.nic{local % spec.nics.count}"

    def homes(self, group: Iterable[int | str]) -> list[tuple[int, str]]:
        """(NVLink domain, :meth:`home_nic`) of each GPU of ``group`` (ranks or vertex names, as :meth:`gpu` takes
        them): a plan's placement asks this for every GPU of the cluster's concurrent groups."""
        gpus, known = self.gpus, self._homes
        return [known[gpus[g] if type(g) is int and 0 <= g < len(gpus) else g if g in known else self.gpu(g)]
                for g in group]

    @cached_property
    def _homes(self) -> dict[str, tuple[int, str]]:
        """:meth:`homes` of every GPU by vertex name, built at once (a name's domain and NIC do not depend on which
        rank it holds: views share it); a GPU's home NIC has its local index on every node."""
        spec, per_domain = self.cluster.node, self._domain_nodes
        nic = [self.home_nic(f"n0.gpu{i}").split(".", 1)[1] for i in range(spec.gpus)]
        return {f"n{n}.gpu{i}": (n // per_domain, f"n{n}.{nic[i]}") for n in range(self.cluster.nodes)
                for i in range(spec.gpus)}

    def _inter_paths(self, a: str, b: str) -> list[Path]:
        nic_a, nic_b = self.home_nic(a), self.home_nic(b)
        first = self._intra_route(a, nic_a)
        last = self._intra_route(nic_b, b)
        middle = self._fabric_route(nic_a, nic_b)
        hops = first[:-1] + middle[:-1] + last
        return [self._make_path(hops)]

    def _intra_route(self, a: str, b: str) -> list[str]:
        """The lowest-latency route between two vertices of one domain off NVLink (a GPU to its NIC)."""
        domain = self.domain_of(a)
        key = ("route", self.to_template(a), self.to_template(b))
        if key not in self._path_cache:
            view = self._node0_view.edge_subgraph(
                [(u, v) for u, v, link in self._node0_view.edges(data="link") if link not in NVLINK])
            self._path_cache[key] = nx.shortest_path(view, key[1], key[2], weight="latency_s")
        return [self.from_template(h, domain) for h in self._path_cache[key]]

    def _fabric_route(self, nic_a: str, nic_b: str) -> list[str]:
        """NIC to NIC through the leaves and, when they differ, one spine chosen by a deterministic ECMP hash."""
        leaf_a, leaf_b = self._leaf(nic_a), self._leaf(nic_b)
        if leaf_a == leaf_b:
            return [nic_a, leaf_a, nic_b]
        spines = self._spines
        ia = self.node_of(nic_a) * 1009 + int(nic_a.rsplit("nic", 1)[1])
        ib = self.node_of(nic_b) * 1009 + int(nic_b.rsplit("nic", 1)[1])
        return [nic_a, leaf_a, spines[(ia + ib) % len(spines)], leaf_b, nic_b]

    def _leaf(self, nic: str) -> str:
        """The leaf a NIC plugs into (its one fabric edge up)."""
        node, index = (int(x) for x in nic[1:].split(".nic"))
        count = self.cluster.node.nics.count
        return f"leaf{build.leaf_of(self.cluster.effective_fabric.kind, node, index, self._layout[0], count)}"

    @cached_property
    def _spines(self) -> list[str]:
        return [f"spine{k}" for k in range(self._layout[2])]

    def _make_path(self, hops: list[str]) -> Path:
        edges = [self.edge(u, v) for u, v in zip(hops, hops[1:], strict=False)]
        return _path_from_edges(hops, edges, self._transport_of)

    def _transport_of(self, links: Iterable[str]) -> str:
        links = set(links)
        if links & NETWORK:
            return "network"
        if links <= NVLINK:
            return "nvlink"
        return "pcie_p2p" if self.cluster.node.pcie.gpu_p2p else "shm"

    # ---- bandwidth ----------------------------------------------------------------------------------------------
    def pair_bandwidth(self, a: int | str, b: int | str) -> float:
        """Per-direction bandwidth from GPU ``a`` to GPU ``b`` over all parallel routes of the preferred transport
        (max-flow), B/s: over NVLink only when the pair talks over NVLink (a DGX A100 pair uses all six switch
        planes: 300 GB/s), else over PCIe/CPU/network links."""
        a, b = self.gpu(a), self.gpu(b)
        transport = self.path(a, b).transport
        if transport == "nvlink":
            view = self.graph.edge_subgraph([(u, v) for u, v, k in self.graph.edges(data="link") if k in NVLINK])
        else:
            view = self.graph.edge_subgraph([(u, v) for u, v, k in self.graph.edges(data="link") if k not in NVLINK])
        return float(nx.maximum_flow_value(view, a, b, capacity="bandwidth_Bps"))

    def nvlink_domain(self, gpu: int | str) -> list[str]:
        """GPUs reachable from ``gpu`` over NVLink alone (itself included), in rank order."""
        gpu = self.gpu(gpu)
        view = self.graph.edge_subgraph([(u, v) for u, v, k in self.graph.edges(data="link") if k in NVLINK])
        if gpu not in view:
            return [gpu]
        reachable = nx.descendants(view, gpu) | {gpu}
        return [g for g in self.gpus if g in reachable]

    # ---- link sharing -------------------------------------------------------------------------------------------
    def edge_flow_counts(self, flows: Iterable[tuple[int | str, int | str]]) -> Counter:
        """How many of a set of concurrent GPU-to-GPU transfers cross each directed edge (preferred routes)."""
        counts: Counter = Counter()
        for a, b in flows:
            counts.update(self.path(a, b).edges)
        return counts

    def flow_bandwidths(self, flows: list[tuple[int | str, int | str]]) -> list[float]:
        """Per-flow bandwidth when the flows run at once: each edge's bandwidth split evenly among the flows
        crossing it, and each flow limited by its most-shared edge, B/s."""
        counts = self.edge_flow_counts(flows)
        result = []
        for a, b in flows:
            result.append(min(self.edge(*e)["bandwidth_Bps"] / counts[e] for e in self.path(a, b).edges))
        return result


def _path_from_hops(graph: nx.DiGraph, hops: list[str], transport_of) -> Path:
    return _path_from_edges(hops, [graph.edges[u, v] for u, v in zip(hops, hops[1:], strict=False)], transport_of)


def _path_from_edges(hops: list[str], edges: list[dict], transport_of) -> Path:
    links = tuple(e["link"] for e in edges)
    return Path(tuple(hops), links, min(e["bandwidth_Bps"] for e in edges), sum(e["latency_s"] for e in edges),
                transport_of(links))


def _widest_then_fastest(graph: nx.DiGraph, a: str, b: str, transport_of) -> list[Path]:
    """All routes whose bottleneck is the largest possible, and among those the lowest-latency ones."""
    widths = sorted({w for _, _, w in graph.edges(data="bandwidth_Bps")}, reverse=True)
    for width in widths:
        view = nx.subgraph_view(graph, filter_edge=lambda u, v, w=width: graph.edges[u, v]["bandwidth_Bps"] >= w)
        if nx.has_path(view, a, b):
            routes = nx.all_shortest_paths(view, a, b, weight="latency_s")
            return [_path_from_hops(graph, list(r), transport_of) for r in routes]
    raise UserError(f"no route from {a} to {b}")
