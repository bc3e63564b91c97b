"""Place a group of ranks on the topology graph: what the group's links are, as a :class:`GroupPlacement`.

This is where the collective model meets the hardware: bandwidths and latencies come from the group's GPUs on the
graph (max-flow to its peers, the PCIe route to each GPU's NIC, the NICs the group uses per node, the switch hops
between its nodes, NICs shared with concurrent groups), never from a per-system constant.

The "node" of the collective model (``GroupPlacement.ranks_per_node``, ``n_nodes``, NCCL's intra/inter split) is the
NVLink domain the topology reports: the server, or a multi-node NVLink domain (a GB200 NVL72 rack's 18 trays). A
group inside one rack is priced on NVLink (NVLS included) and one spanning racks on the NICs of its domains.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import networkx as nx
import numpy as np

from simulator.arrays import distinct
from simulator.caching import memo
from simulator.collectives.placement import GroupPlacement, NetIssue
from simulator.errors import UserError
from simulator.hardware import load_cluster
from simulator.topology import Topology

_ARCH = {"7.0": "sm70", "8.0": "sm80", "8.6": "sm86", "8.9": "sm86", "9.0": "sm90", "10.0": "sm100"}
#: NVLink SHARP (NVSwitch multicast, NCCL's NVLS algorithms) needs compute capability 9.0 or newer (Hopper on)
NVLS_MIN_COMPUTE_CAPABILITY = (9, 0)
_TRANSPORT = {"nvlink": "nvlink", "pcie_p2p": "pcie_p2p", "shm": "shm"}


def place_group(topology: Topology, gpus: Sequence[int | str], *, concurrent_groups: Sequence[Sequence] = (),
                net_issue: NetIssue = "cpu_proxy", **overrides) -> GroupPlacement:
    """Summarise how the ranks ``gpus`` (global indices or vertex names) sit on ``topology``.

    Args:
        topology: the cluster graph.
        gpus: the group's GPUs in rank order.
        concurrent_groups: other groups communicating at the same time (e.g. the other DP groups of a plan); the
            number of groups whose inter-node traffic leaves through one NIC divides that NIC's bandwidth.
        net_issue: who posts network work: ``cpu_proxy`` (IBRC) or ``ibgda`` (GPU-initiated).
        overrides: any :class:`GroupPlacement` field, e.g. ``nvls=False`` for a run with NCCL_NVLS_ENABLE=0.
    """
    key = (tuple(gpus), tuple(tuple(g) for g in concurrent_groups), net_issue, tuple(sorted(overrides.items())))
    cache = topology.placement_cache
    if key not in cache:
        cache[key] = _place(topology, gpus, concurrent_groups, net_issue, overrides)
    return cache[key]


def _place(topology: Topology, gpus: Sequence[int | str], concurrent_groups: Sequence[Sequence],
           net_issue: NetIssue, overrides: dict) -> GroupPlacement:
    names = [topology.gpu(g) for g in gpus]
    if len(set(names)) != len(names):
        raise UserError(f"a group lists a GPU twice: {names}")
    per_domain = Counter(topology.domain_of(g) for g in names)
    counts = set(per_domain.values())
    uneven: tuple[int, ...] = ()
    if len(counts) != 1:
        what = "nodes" if topology.cluster.domain_nodes == 1 else "NVLink domains"
        if not topology.uneven_groups:
            raise UserError(f"the group's GPUs are spread unevenly over {what} {dict(per_domain)}; the collective "
                            f"model needs the same number of ranks on every one")
        uneven = tuple(per_domain[d] for d in sorted(per_domain))
        # NCCL takes each channel count and bandwidth as the minimum over the ranks (GroupPlacement.domain_ranks):
        # describe the emptiest domain (its GPUs first: the per-node fields read the first domain)
        weakest = min(sorted(per_domain), key=lambda d: per_domain[d])
        names = sorted(names, key=lambda g: topology.domain_of(g) != weakest)
    rpn = min(counts)
    spec = topology.cluster.node
    first_domain = [g for g in names if topology.domain_of(g) == topology.domain_of(names[0])]
    pair = _local_pair(topology, first_domain)
    path = topology.path(*pair)
    fields = dict(
        n_ranks=len(names), ranks_per_node=rpn, gpu_arch=_arch(spec.gpu.compute_capability),
        intra_transport=_TRANSPORT[path.transport], intra_bw_Bps=_intra_bandwidth(topology, pair[0], first_domain),
        intra_latency_s=path.latency_s, nvswitch=spec.nvswitch is not None,
        nvls=bool(spec.nvswitch and spec.nvswitch.nvls
                  and spec.gpu.compute_capability_version >= NVLS_MIN_COMPUTE_CAPABILITY),
        cpu_vendor=_vendor(spec.cpu.model), net_issue=net_issue, pcie_bw_Bps=_gpu_pcie_bandwidth(topology, names[0]),
        domain_ranks=uneven,
    )
    if spec.nics is not None:
        fields.update(_network_fields(topology, names, concurrent_groups))
    fields.update(overrides)
    return GroupPlacement(**fields)


def _gpu_pcie_bandwidth(topology: Topology, gpu: str) -> float:
    """The GPU's own PCIe link (the host path of SHM transport when there is no NIC)."""
    graph = topology.domain_graph()
    local = topology.to_template(gpu)
    return max(graph.edges[local, v]["bandwidth_Bps"] for v in graph.successors(local)
               if graph.edges[local, v]["link"] == "pcie")


def _local_pair(topology: Topology, local: list[str]) -> tuple[str, str]:
    """Two GPUs of one NVLink domain: two of the group's when it has them, else the domain's first two (any pair
    tells the transport; a group with one GPU per domain never uses it)."""
    if len(local) >= 2:
        return local[0], local[1]
    node_gpus = topology.gpus_of_domain(topology.domain_of(local[0]))
    other = next(g for g in node_gpus if g != local[0]) if len(node_gpus) > 1 else None
    if other is None:
        raise UserError(f"node profile {topology.cluster.node.name} has one GPU; nothing to place")
    return local[0], other


def _intra_bandwidth(topology: Topology, gpu: str, local: list[str]) -> float:
    """Per-direction bandwidth from ``gpu`` to all other GPUs of its NVLink domain at once (max-flow to a virtual
    sink): all of its NVLinks on an NVSwitch node or rack, the bridge on a bridged pair, its PCIe link otherwise."""
    domain = topology.gpus_of_domain(topology.domain_of(gpu))
    peers = local[1:] if len(local) > 1 else [g for g in domain if g != gpu]
    transport = topology.path(gpu, peers[0]).transport
    return _flow_to_peers(topology, gpu, tuple(peers), transport)


def _flow_to_peers(topology: Topology, gpu: str, peers: tuple[str, ...], transport: str) -> float:
    """Max-flow inside one NVLink domain, computed on domain 0 (every domain is a copy), cached on the topology."""
    local = topology.to_template(gpu)
    local_peers = tuple(topology.to_template(p) for p in peers)
    cache = topology.flow_cache
    key = (local, local_peers, transport)
    if key not in cache:
        graph = topology.domain_graph()
        keep = [(u, v) for u, v, k in graph.edges(data="link") if (k == "nvlink") == (transport == "nvlink")]
        view = nx.DiGraph(graph.edge_subgraph(keep))
        for peer in local_peers:
            view.add_edge(peer, "sink", bandwidth_Bps=float("inf"))
        cache[key] = float(nx.maximum_flow_value(view, local, "sink", capacity="bandwidth_Bps"))
    return cache[key]


def _network_fields(topology: Topology, names: list[str], concurrent: Sequence[Sequence]) -> dict:
    spec = topology.cluster.node
    nics = {topology.home_nic(g) for g in names}
    first_domain = topology.domain_of(names[0])
    nics_per_node = len({n for n in nics if topology.domain_of(n) == first_domain})
    gpu = names[0]
    pcie = topology._intra_route(gpu, topology.home_nic(gpu))
    pcie_bw = min(topology.edge(*e)["bandwidth_Bps"] for e in zip(pcie, pcie[1:], strict=False))
    fields = dict(pcie_bw_Bps=pcie_bw, nics_per_node=nics_per_node, nic_bw_Bps=spec.nics.bandwidth)
    domains = sorted({topology.domain_of(g) for g in names})
    if len(domains) > 1:
        route = topology._fabric_route(topology.home_nic(gpu), topology.home_nic(
            next(g for g in names if topology.domain_of(g) != first_domain)))
        switches = [v for v in route if topology.node_of(v) is None]  # leaves and spines
        fabric = topology.cluster.effective_fabric
        # NCCL's network latency constant already covers one switch; each further switch adds its latency
        fields["net_latency_s"] = (len(switches) - 1) * fabric.switch_latency
        if any(v.startswith("spine") for v in route):
            fields["fabric_oversubscription"] = fabric.oversubscription
        fields["nic_sharing"] = _nic_sharing(topology, names, concurrent)
    return fields


def _nic_sharing(topology: Topology, names: list[str], concurrent: Sequence[Sequence]) -> int:
    """Largest number of groups spanning NVLink domains (this one included) whose traffic leaves through one of our
    NICs: each spanning group counts once on every NIC its GPUs use. Counted over all groups at once (a plan on 131k
    GPUs has 10^5 concurrent groups)."""
    groups = [g for g in [names, *concurrent] if len(g)]
    sizes = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    homes = topology.homes(itertools.chain.from_iterable(groups))
    codes: dict[str, int] = {}
    nic = np.fromiter((codes.setdefault(n, len(codes)) for _, n in homes), dtype=np.int64, count=len(homes))
    domain = np.fromiter((d for d, _ in homes), dtype=np.int64, count=len(homes))
    starts = np.cumsum(sizes) - sizes
    spanning = np.minimum.reduceat(domain, starts) != np.maximum.reduceat(domain, starts)
    member_of = np.repeat(np.arange(len(groups)), sizes)
    used = distinct((member_of * len(codes) + nic)[np.repeat(spanning, sizes)])  # (group, NIC) pairs, once each
    users = np.bincount(used % len(codes), minlength=len(codes))
    return int(users[nic[:len(names)]].max())


def _arch(compute_capability: str) -> str:
    if compute_capability not in _ARCH:
        raise UserError(f"no NCCL constants for compute capability {compute_capability}; known: {', '.join(_ARCH)}")
    return _ARCH[compute_capability]


def _vendor(cpu_model: str) -> str:
    """NCCL picks its LL bandwidth cap and network overhead by CPU vendor; unknown CPUs (VMs) count as Intel."""
    model = cpu_model.lower()
    if "amd" in model or "epyc" in model or "threadripper" in model:
        return "amd"
    if "grace" in model or "arm" in model or "neoverse" in model:
        return "arm"
    return "intel"


@memo(maxsize=32, loaded=True)
def _topology(profile: str, nodes: int, domain_nodes: int | None = None) -> Topology:
    return Topology(load_cluster(profile, nodes, domain_nodes=domain_nodes))


def placement_for_profile(profile: str, n_ranks: int, ranks_per_node: int | None = None,
                          **overrides) -> GroupPlacement:
    """A group of ``n_ranks`` on a cluster of node profile ``profile``: the first ``ranks_per_node`` GPUs (default:
    as many as fit) of as many nodes as needed (a multi-node NVLink domain counts its nodes: 72 ranks on
    ``gb200_nvl72`` are 4 per tray on 18 trays, one domain). ``domain_nodes``: nodes of each multi-node NVLink domain
    in use (as the scenario's ``system.nvlink_domain_nodes``). ``overrides`` as in :func:`place_group`."""
    domain_nodes = overrides.pop("domain_nodes", None)
    gpus_per_node = _topology(profile, 1, domain_nodes).cluster.node.gpus
    rpn = ranks_per_node or min(n_ranks, gpus_per_node)
    if rpn > gpus_per_node or n_ranks % rpn:
        raise UserError(f"{n_ranks} ranks at {rpn} per node do not fit {profile} ({gpus_per_node} GPUs per node)",
                        key_path="ranks")
    nodes = n_ranks // rpn
    topology = _topology(profile, nodes, domain_nodes)
    gpus = [f"n{n}.gpu{i}" for n in range(nodes) for i in range(rpn)]
    net_issue = overrides.pop("net_issue", "cpu_proxy")
    return place_group(topology, gpus, net_issue=net_issue, **overrides)
