"""The cluster as a networkx graph: paths, bandwidths, NVLink domains and link sharing."""

from simulator.topology.cached import topology_of
from simulator.topology.topology import Path, Topology

__all__ = ["Path", "Topology", "topology_of"]
