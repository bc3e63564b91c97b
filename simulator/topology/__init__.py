"""The cluster as a networkx graph: paths, bandwidths, NVLink domains and link sharing."""

from simulator.topology.topology import Path, Topology

__all__ = ["Path", "Topology"]
