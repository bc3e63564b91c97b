"""AWS p4d.24xlarge (hardware_profiles/nodes/p4d_24xlarge.yaml): the numbers of AWS's product page, and what its
4 x 100 Gb/s of EFA means against a DGX A100's 8 x 200 Gb/s InfiniBand."""

import pytest

from simulator.collectives import build_cost_model, evaluate, place_group
from simulator.hardware import load_cluster, load_node
from simulator.topology import Topology
from simulator.units import GB, GIBI


def test_product_page_numbers():
    node = load_node("p4d_24xlarge")
    assert node.gpus == 8 and node.gpu.name.startswith("a100") and node.gpu.memory.capacity == 40 * GIBI
    assert node.nics.count * node.nics.bandwidth == 400e9 / 8          # 400 Gb/s of EFA = 50 GB/s per node
    assert node.nics.kind == "eth" and node.nvswitch.count == 6
    assert node.gpu.nvlink.total_Bps == 300 * GB                       # AWS's 600 GB/s is both directions
    assert node.cpu.sockets * node.cpu.cores_per_socket * 2 == 96       # 96 vCPUs


def _ring_busbw(profile: str) -> float:
    topology = Topology(load_cluster(profile, 2))
    nbytes = 4 * GIBI
    placement = place_group(topology, list(range(16)))
    t = float(evaluate(build_cost_model(placement), "all_reduce", [nbytes], algo="ring").times_s[0])
    return nbytes / t * 2 * 15 / 16


def test_inter_node_ring_is_a_quarter_of_a_dgx_a100():
    """A 2-node ring all-reduce of 4 GiB is bound by the NICs: 50 GB/s per node on p4d against 200 GB/s on a DGX
    A100, so its bus bandwidth is a quarter (the same per-NIC efficiency applies to both)."""
    p4d, dgx = _ring_busbw("p4d_24xlarge"), _ring_busbw("dgx_a100_40gb")
    assert p4d < 50e9 and p4d / dgx == pytest.approx(0.25, rel=0.02)
