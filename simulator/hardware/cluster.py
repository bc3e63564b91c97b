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
        return self

    @property
    def effective_fabric(self) -> FabricSpec | None:
        return self.fabric or self.node.fabric

    @property
    def gpus(self) -> int:
        """GPUs in the cluster."""
        return self.nodes * self.node.gpus
