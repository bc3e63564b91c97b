"""The topology graph: paths, max-flow, NVLink domains and link sharing on the shipped profiles."""

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware import FabricSpec, load_cluster
from simulator.topology import Topology
from simulator.units import GB


@pytest.fixture(scope="module")
def dgx_a100_x2():
    return Topology(load_cluster("dgx_a100_80gb", 2))


def test_dgx_a100_every_pair_crosses_exactly_one_nvswitch(dgx_a100_x2):
    topo = dgx_a100_x2
    graph = topo.graph
    for a in range(8):
        for b in range(8):
            if a == b:
                continue
            paths = topo.paths(a, b)
            assert len(paths) == 6  # one per NVSwitch plane
            for path in paths:
                kinds = [graph.nodes[v]["kind"] for v in path.hops]
                assert kinds == ["gpu", "nvswitch", "gpu"]
                assert path.transport == "nvlink" and path.bottleneck_Bps == 50 * GB


def test_dgx_a100_gpu_switch_edges_carry_two_links(dgx_a100_x2):
    graph = dgx_a100_x2.graph
    edges = [(u, v) for u, v, k in graph.edges(data="link") if k == "nvlink"]
    assert len(edges) == 2 * 2 * 8 * 6  # 2 nodes x 8 GPUs x 6 switches x 2 directions
    assert {graph.edges[e]["bandwidth_Bps"] for e in edges} == {2 * 25 * GB}


def test_pair_max_flow_is_the_sum_over_switch_planes(dgx_a100_x2):
    assert dgx_a100_x2.pair_bandwidth(0, 5) == pytest.approx(300 * GB)
    h100 = Topology(load_cluster("dgx_h100", 1))
    assert h100.pair_bandwidth(2, 7) == pytest.approx(450 * GB)
    split = sorted(h100.graph.edges["n0.gpu0", f"n0.nvsw{s}"]["bandwidth_Bps"] for s in range(4))
    assert split == [100 * GB, 100 * GB, 125 * GB, 125 * GB]  # 4/4/5/5 links of 25 GB/s


def test_internode_path_goes_through_pcie_switches_nic_and_leaf(dgx_a100_x2):
    topo = dgx_a100_x2
    path = topo.path("gpu0", "gpu9")
    kinds = [topo.graph.nodes[v]["kind"] for v in path.hops]
    assert kinds[:4] == ["gpu", "pcie_switch", "pcie_switch", "pcie_switch"]
    assert kinds[4:6] == ["nic", "leaf"] and kinds[-1] == "gpu"
    assert "cpu" not in kinds  # GPUDirect RDMA: no CPU on the way
    assert path.transport == "network"
    assert path.bottleneck_Bps == pytest.approx(25 * GB)  # one HDR port
    assert path.hops[4] == "n0.nic0" and path.hops[-5] == "n1.nic1"  # each GPU's own NIC


def test_gpus_0_and_1_share_a_pcie_switch_and_nic_pair(dgx_a100_x2):
    graph = dgx_a100_x2.graph
    def switch_of(v):
        return next(u for u in graph.successors(v) if graph.nodes[u]["kind"] == "pcie_switch")
    assert switch_of("n0.gpu0") == switch_of("n0.gpu1") != switch_of("n0.gpu2")
    top = "n0.pcie0"
    assert {switch_of("n0.nic0"), switch_of("n0.nic1")} == {f"{top}.n"}
    assert nx.has_path(graph.subgraph(["n0.gpu0", "n0.pcie0.g", top, "n0.pcie0.n", "n0.nic1"]), "n0.gpu0", "n0.nic1")


def test_rtx3090_pcie_box_has_no_gpu_edge_bypassing_the_cpu():
    topo = Topology(load_cluster("rtx3090_x4_pcie", 1))
    graph = topo.graph
    for gpu in topo.gpus:
        assert {graph.nodes[v]["kind"] for v in graph.successors(gpu)} == {"cpu"}
    path = topo.path(0, 3)
    assert [graph.nodes[v]["kind"] for v in path.hops] == ["gpu", "cpu", "gpu"]
    assert path.transport == "shm"  # GeForce: no P2P, staged through host memory
    assert topo.nvlink_domain(2) == ["n0.gpu2"]


def test_rtx3090_bridge_pair_talks_over_nvlink():
    topo = Topology(load_cluster("rtx3090_x2_nvlink", 1))
    path = topo.path(0, 1)
    assert path.transport == "nvlink" and path.hops == ("n0.gpu0", "n0.gpu1")
    assert topo.pair_bandwidth(0, 1) == pytest.approx(56.25 * GB)


def test_h200_pair_is_nv18():
    topo = Topology(load_cluster("h200_x2", 1))
    assert topo.pair_bandwidth(0, 1) == pytest.approx(450 * GB)
    # the widest single routes are the two 5-link switch planes; max-flow adds the two 4-link planes
    assert [p.hops[1] for p in topo.paths(0, 1)] == ["n0.nvsw0", "n0.nvsw3"]


def test_nvlink_domain_is_the_node(dgx_a100_x2):
    assert dgx_a100_x2.nvlink_domain("n1.gpu3") == [f"n1.gpu{i}" for i in range(8)]
    assert dgx_a100_x2.gpus_of_node(1)[0] == "n1.gpu0" and len(dgx_a100_x2.nics_of_node(0)) == 8


def test_concurrent_flows_share_the_destination_nic(dgx_a100_x2):
    topo = dgx_a100_x2
    flows = [(f"n0.gpu{i}", "n1.gpu0") for i in range(8)]
    counts = topo.edge_flow_counts(flows)
    assert counts[("n1.nic0", "n1.pcie0.n")] == 8
    assert topo.flow_bandwidths(flows) == pytest.approx([25 * GB / 8] * 8)
    rails = [(f"n0.gpu{i}", f"n1.gpu{i}") for i in range(8)]
    assert topo.flow_bandwidths(rails) == pytest.approx([25 * GB] * 8)  # each GPU on its own NIC


def test_rail_optimized_fabric_puts_nic_i_on_rail_leaf_i():
    fabric = FabricSpec(kind="rail_optimized", leaf_ports=40, switch_latency="130 ns")
    topo = Topology(load_cluster("dgx_a100_80gb", 4, fabric))
    for node in range(4):
        for i in range(8):
            assert list(topo.graph.successors(f"n{node}.nic{i}"))[-1] == f"leaf{i}"
    path = topo.path("n0.gpu3", "n3.gpu3")
    assert [topo.graph.nodes[v]["kind"] for v in path.hops].count("leaf") == 1


def test_oversubscription_cuts_leaf_uplinks():
    full = Topology(load_cluster("dgx_h100", 16))
    half = Topology(load_cluster("dgx_h100", 16, FabricSpec(leaf_ports=64, oversubscription=2.0,
                                                            switch_latency="130 ns")))
    def uplink(topo):
        return sum(topo.graph.edges["leaf0", s]["bandwidth_Bps"] for s in topo.vertices_of_kind("spine"))
    def downlink(topo):
        return sum(topo.graph.edges[u, "leaf0"]["bandwidth_Bps"] for u in topo.graph.predecessors("leaf0")
                   if topo.graph.nodes[u]["kind"] == "nic")
    assert uplink(full) == pytest.approx(downlink(full))
    assert uplink(half) == pytest.approx(downlink(half) / 2, rel=0.1)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 15), st.integers(0, 15))
def test_max_flow_is_at_least_the_path_bottleneck(dgx_a100_x2, a, b):
    if a == b:
        return
    path = dgx_a100_x2.path(a, b)
    assert dgx_a100_x2.pair_bandwidth(a, b) >= path.bottleneck_Bps
    assert path.latency_s > 0


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15)).filter(lambda p: p[0] != p[1]),
                min_size=1, max_size=12))
def test_shared_edges_never_carry_more_than_their_bandwidth(dgx_a100_x2, flows):
    topo = dgx_a100_x2
    rates = topo.flow_bandwidths(flows)
    load: dict = {}
    for (a, b), rate in zip(flows, rates, strict=True):
        assert rate <= topo.path(a, b).bottleneck_Bps + 1
        for edge in topo.path(a, b).edges:
            load[edge] = load.get(edge, 0.0) + rate
    for edge, total in load.items():
        assert total <= topo.graph.edges[edge]["bandwidth_Bps"] * (1 + 1e-9)


def test_intra_node_answers_do_not_depend_on_cluster_size():
    small = Topology(load_cluster("dgx_h100", 1))
    big = Topology(load_cluster("dgx_h100", 32))
    assert big.pair_bandwidth("n31.gpu1", "n31.gpu6") == small.pair_bandwidth(1, 6)
    assert big.path("n31.gpu1", "n31.gpu6").latency_s == small.path(1, 6).latency_s


def test_nvlink_is_preferred_even_when_one_plane_is_narrower_than_pcie():
    topo = Topology(load_cluster("hgx_h800", 1))
    paths = topo.paths(0, 5)
    assert len(paths) == 4 and all(p.transport == "nvlink" for p in paths)
    assert paths[0].bottleneck_Bps == pytest.approx(50 * GB)  # 2 links x 25 GB/s per switch plane
    assert topo.pair_bandwidth(0, 5) == pytest.approx(200 * GB)


def test_rank_views_are_kept_per_gpus_and_indexed_by_their_own_ranks(dgx_a100_x2):
    """with_ranks_on builds one view per GPU tuple (a plan search reuses its placements); a view's own views index
    the view's ranks, not the cluster's."""
    from simulator.collectives import place_group

    second = dgx_a100_x2.with_ranks_on(tuple(range(8, 16)))
    assert dgx_a100_x2.with_ranks_on(tuple(range(8, 16))) is second
    assert place_group(second, [0, 1, 2, 3]) is place_group(dgx_a100_x2.with_ranks_on(tuple(range(8, 16))), [0, 1, 2, 3])
    assert second.with_ranks_on((0, 1)).gpus == ["n1.gpu0", "n1.gpu1"]
    assert dgx_a100_x2.with_ranks_on((0, 1)).gpus == ["n0.gpu0", "n0.gpu1"]
    assert second.placement_cache is not dgx_a100_x2.placement_cache


@pytest.mark.parametrize("profile,nodes,fabric", [
    ("dgx_h100", 40, None),  # the profile's own fabric: several leaves, spines
    ("dgx_a100_80gb", 12, {"kind": "fat_tree", "leaf_ports": 40, "oversubscription": 3.0, "switch_latency": "130 ns"}),
    ("hgx_h800", 9, {"kind": "rail_optimized", "leaf_ports": 16, "oversubscription": 1.0, "switch_latency": "200 ns"}),
    ("gb200_nvl72", 36, None),  # two racks
])
def test_fabric_answered_without_its_graph(profile, nodes, fabric):
    """Every edge of the fabric graph has the attributes fabric_edge computes from the layout, each NIC's route
    starts at its graph leaf, a non-edge is a KeyError, and cross-node paths never build the fabric graph."""
    from simulator.topology.build import fabric_edge, fabric_graph

    cluster = load_cluster(profile, nodes, fabric=fabric)
    graph = fabric_graph(cluster)
    assert graph.number_of_edges() > 0
    for u, v, data in graph.edges(data=True):
        assert fabric_edge(cluster, u, v) == data
    topo = Topology(cluster)
    nics = [v for v, k in graph.nodes(data="kind") if k is None]  # NICs: named by the links only
    assert len(nics) == nodes * cluster.node.nics.count
    for nic in nics:
        assert list(graph.successors(nic)) == [topo._leaf(nic)]
    spines = sorted((v for v, k in graph.nodes(data="kind") if k == "spine"), key=lambda v: graph.nodes[v]["index"])
    assert topo._spines == spines
    for u, v in (("n0.nic0", "spine0"), ("leaf0", "leaf1"), (f"n{nodes}.nic0", "leaf0"), ("n0.gpu0", "leaf0")):
        assert not graph.has_edge(u, v)
        with pytest.raises(KeyError):
            fabric_edge(cluster, u, v)
    topo.path(0, len(topo.gpus) - 1)
    assert "_fabric" not in topo.__dict__ and "graph" not in topo.__dict__


@pytest.mark.parametrize("profile,nodes", [("p4d_24xlarge", 3), ("gb200_nvl72", 36), ("dgx_h100", 2)])
def test_homes_are_each_gpus_domain_and_nic(profile, nodes):
    """homes() (the table the NIC-sharing count reads) agrees GPU by GPU with domain_of and home_nic, by rank and
    by name, on a view whose ranks sit on other GPUs too (p4d: 4 NICs for 8 GPUs, one per PCIe complex)."""
    topo = Topology(load_cluster(profile, nodes))
    expected = [(topo.domain_of(g), topo.home_nic(g)) for g in topo.gpus]
    assert topo.homes(range(len(topo.gpus))) == expected
    assert topo.homes(reversed(topo.gpus)) == expected[::-1]
    view = topo.with_ranks_on(tuple(range(len(topo.gpus)))[::-1])
    assert view.homes([0, 1]) == [expected[-1], expected[-2]]
    with pytest.raises(Exception, match="unknown GPU"):
        topo.homes([len(topo.gpus)])
