"""One topology graph per distinct cluster, built once: sweeps, searches and serving runs over many plans on one
cluster share it (the key is the cluster spec's JSON, so any field of the spec keys it)."""

from __future__ import annotations

from simulator.caching import memo
from simulator.hardware import ClusterSpec
from simulator.topology.topology import Topology


@memo(maxsize=16, loaded=True)
def _topology(cluster_json: str) -> Topology:
    return Topology(ClusterSpec.model_validate_json(cluster_json))


def topology_of(cluster: ClusterSpec) -> Topology:
    """The (cached) topology graph of ``cluster``."""
    return _topology(cluster.model_dump_json())
