"""Cluster spec: N identical nodes joined by a fabric."""

from __future__ import annotations

from pydantic import Field, model_validator

from simulator.hardware.fields import Spec
from simulator.hardware.node import FabricSpec, NodeSpec


class ClusterSpec(Spec):
    node: NodeSpec
    nodes: int = Field(1, gt=0)
    fabric: FabricSpec | None = Field(None, description="default: the node profile's fabric")

    @model_validator(mode="after")
    def _network(self) -> ClusterSpec:
        if self.nodes > 1 and self.node.nics is None:
            raise ValueError(f"{self.nodes} nodes need a network, but node profile {self.node.name} has no NICs")
        if self.nodes > 1 and self.effective_fabric is None:
            raise ValueError(f"{self.nodes} nodes need a fabric; node profile {self.node.name} has no default")
        domain = self.node.nvlink_domain
        if domain is not None and self.nodes > domain.nodes and self.nodes % domain.nodes:
            raise ValueError(f"{self.nodes} nodes of {self.node.name} do not fill whole NVLink domains of "
                             f"{domain.nodes} nodes: use at most {domain.nodes} or a multiple of it")
        return self

    @property
    def effective_fabric(self) -> FabricSpec | None:
        return self.fabric or self.node.fabric

    @property
    def domain_nodes(self) -> int:
        """Nodes per NVLink domain: the node itself, or the nodes sharing NVSwitches (a GB200 NVL72 rack: 18 trays;
        a cluster smaller than one domain is one domain of all its nodes)."""
        domain = self.node.nvlink_domain
        return min(domain.nodes, self.nodes) if domain is not None else 1

    @property
    def domain_gpus(self) -> int:
        """GPUs per NVLink domain."""
        return self.domain_nodes * self.node.gpus

    @property
    def domains(self) -> int:
        """NVLink domains in the cluster."""
        return self.nodes // self.domain_nodes

    @property
    def gpus(self) -> int:
        """GPUs in the cluster."""
        return self.nodes * self.node.gpus
