"""Hardware specs (GPU, node, cluster) as strict pydantic models, and profile loading."""

from simulator.hardware.cluster import ClusterSpec
from simulator.hardware.gpu import TENSOR_DTYPES, GpuSpec, pcie_bandwidth_Bps
from simulator.hardware.loader import list_profiles, load_cluster, load_gpu, load_node, load_profile
from simulator.hardware.node import FabricSpec, NodeSpec, NvlinkDomainSpec

__all__ = [
    "TENSOR_DTYPES", "ClusterSpec", "FabricSpec", "GpuSpec", "NodeSpec", "NvlinkDomainSpec", "list_profiles", "load_cluster",
    "load_gpu", "load_node", "load_profile", "pcie_bandwidth_Bps",
]
