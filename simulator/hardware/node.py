"""Node spec: GPUs, their NVLink/NVSwitch wiring, PCIe switch complexes, CPUs/NUMA and NICs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simulator.hardware.fields import Bandwidth, Bytes, Seconds, Spec
from simulator.hardware.gpu import GpuSpec


class NvSwitchSpec(Spec):
    """The NVSwitch planes of a node. Every GPU connects to every switch with ``links_per_gpu[i]`` NVLinks."""

    count: int = Field(gt=0)
    generation: int = Field(ge=1, le=5, description="NVSwitch generation: 2 on DGX A100, 3 on DGX H100 / HGX H200, "
                                                    "4 on HGX B200 and the GB200 NVL72 NVLink switch trays")
    nvls: bool = Field(description="NVLink SHARP in-switch reduction and multicast (NVSwitch gen3+)")
    links_per_gpu: list[int] = Field(description="NVLinks from each GPU to switch i (len == count)")

    @model_validator(mode="after")
    def _check(self) -> NvSwitchSpec:
        if len(self.links_per_gpu) != self.count:
            raise ValueError(f"links_per_gpu has {len(self.links_per_gpu)} entries for {self.count} switches")
        if any(n <= 0 for n in self.links_per_gpu):
            raise ValueError("links_per_gpu entries must be positive")
        if self.nvls and self.generation < 3:
            raise ValueError(f"NVLS needs NVSwitch gen3 or newer, this is gen{self.generation}")
        return self


class NvlinkDomainSpec(Spec):
    """NVSwitches shared by several nodes: one NVLink domain that spans ``nodes`` consecutive nodes (a GB200 NVL72 rack
    is 18 compute trays whose GPUs all reach the rack's NVLink switch trays). The node's ``nvswitch`` then describes
    the domain's switch chips (every GPU of every node of the domain links to each of them); without this section the
    NVLink domain is the node."""

    nodes: int = Field(gt=1, description="consecutive nodes (compute trays) that share the NVSwitches")
    switch_trays: int = Field(gt=0, description="NVLink switch trays holding the switch chips (descriptive)")
    source: str = Field(description="where the domain's layout comes from")


class C2cSpec(Spec):
    """A cache-coherent chip-to-chip link between each GPU and the CPU of its PCIe complex (Grace-Blackwell NVLink-C2C)."""

    bandwidth: Bandwidth = Field(description="per direction, per GPU (NVLink-C2C: 900 GB/s bidirectional = 450)")
    source: str


class NvlinkBridge(Spec):
    """A direct GPU-to-GPU NVLink connection (e.g. the RTX 3090 NVLink bridge)."""

    gpus: tuple[int, int]
    links: int = Field(gt=0)


class PcieComplex(Spec):
    """GPUs and NICs behind one upstream port of a CPU (NUMA domain ``numa``)."""

    numa: int = Field(ge=0, description="NUMA domain (node-wide index) whose root port the complex hangs off")
    gpus: list[int] = Field(default_factory=list)
    nics: list[int] = Field(default_factory=list)


class PcieSpec(Spec):
    generation: int = Field(ge=1, le=6)
    switch_levels: Literal[0, 1, 2] = Field(
        description="0: devices on CPU root ports; 1: one switch per complex; "
                    "2: an upstream switch per complex with a GPU-side and a NIC-side switch below it")
    gpu_p2p: bool = Field(description="GPUs may do peer-to-peer DMA over PCIe (false on GeForce cards)")
    complexes: list[PcieComplex] = Field(min_length=1)


class CpuSpec(Spec):
    model: str
    sockets: int = Field(gt=0)
    cores_per_socket: int = Field(gt=0)
    numa_per_socket: int = Field(gt=0, description="NUMA domains per socket (NPS4 on DGX A100 gives 4)")
    socket_link: Literal["upi", "xgmi", "c2c"] = Field(description="socket-to-socket interconnect")
    socket_link_bandwidth: Bandwidth = Field(description="per direction, all socket links together")
    numa_link_bandwidth: Bandwidth = Field(description="between NUMA domains of one socket, per direction")
    memory_capacity: Bytes | None = Field(
        None, description="host (system) memory of the node, all sockets; offload's capacity check (docs/offload.md); "
                          "null: unknown, offload refused")
    memory_bandwidth: Bandwidth | None = Field(
        None, description="peak DRAM bandwidth of the node, all sockets (channels x transfer rate x 8 B); the CPU "
                          "optimizer step of offload streams at a fraction of it; null: unknown, offload refused")
    memory_source: str | None = Field(None, description="where memory_capacity and memory_bandwidth come from")

    @property
    def numa_domains(self) -> int:
        return self.sockets * self.numa_per_socket


class NvmeSpec(Spec):
    """The node's local NVMe drives (ZeRO-Infinity's parameter offload to NVMe, docs/offload.md)."""

    drives: int = Field(gt=0)
    read_bandwidth: Bandwidth = Field(description="sequential read of one drive")
    write_bandwidth: Bandwidth = Field(description="sequential write of one drive")
    capacity: Bytes = Field(description="one drive")
    source: str


class NicSpec(Spec):
    model: str
    count: int = Field(gt=0)
    kind: Literal["ib", "eth"] = Field(description="InfiniBand or Ethernet (RoCE)")
    bandwidth: Bandwidth = Field(description="port speed per direction, e.g. '200 Gb/s'")
    pcie_lanes: int = Field(16, gt=0, le=32)


class NodeLatencies(Spec):
    """One-way latency added by each hop class (wire plus switch traversal), used for path latency sums."""

    nvlink_hop: Seconds
    pcie_hop: Seconds
    cpu_hop: Seconds
    nic: Seconds = Field(description="NIC traversal (each end)")


class FabricSpec(Spec):
    """Network between nodes: a two-level leaf/spine Clos, fat-tree or rail-optimized."""

    kind: Literal["fat_tree", "rail_optimized"] = Field(
        "fat_tree", description="fat_tree: all NICs of a node on one leaf; rail_optimized: NIC i of every node "
                                "on rail leaf i")
    leaf_ports: int = Field(gt=1, description="ports per leaf switch (40 on QM8700 HDR, 64 on QM9700 NDR)")
    oversubscription: float = Field(1.0, ge=1.0, description="leaf down-link to up-link bandwidth ratio")
    switch_latency: Seconds = Field(description="port-to-port latency of one switch")


class StorageSpec(Spec):
    """Where a node writes checkpoints (the whole-run model, docs/whole_run.md "Checkpoints"), bytes/s per node."""

    network_write: Bandwidth | None = Field(None, description="the node's storage-network link to a parallel file "
                                                              "system (line rate: an upper bound)")
    local_write: Bandwidth | None = Field(None, description="the node's local NVMe drives together")
    source: str = Field(description="where the figures come from")


class NodeSpec(Spec):
    """One server. Indices of GPUs and NICs are node-local (0..count-1)."""

    name: str
    source: str
    gpu: GpuSpec
    gpus: int = Field(gt=0)
    nvswitch: NvSwitchSpec | None = None
    nvlink_bridges: list[NvlinkBridge] = Field(default_factory=list)
    nvlink_domain: NvlinkDomainSpec | None = Field(
        None, description="NVSwitches shared with the next nodes (multi-node NVLink); default: the domain is the node")
    c2c: C2cSpec | None = Field(None, description="GPU-CPU coherent link (Grace Blackwell); default: none")
    pcie: PcieSpec
    cpu: CpuSpec
    nics: NicSpec | None = None
    nvme: NvmeSpec | None = Field(None, description="local NVMe drives (offload to NVMe); default: none")
    latency: NodeLatencies
    fabric: FabricSpec | None = Field(None, description="default fabric when nodes of this kind form a cluster")
    storage: StorageSpec | None = Field(None, description="checkpoint storage links (null: give them in run.checkpoint)")

    @model_validator(mode="after")
    def _wiring(self) -> NodeSpec:
        gpus = sorted(g for c in self.pcie.complexes for g in c.gpus)
        if gpus != list(range(self.gpus)):
            raise ValueError(f"pcie.complexes must place each of the {self.gpus} GPUs exactly once, got {gpus}")
        nic_count = self.nics.count if self.nics else 0
        nics = sorted(n for c in self.pcie.complexes for n in c.nics)
        if nics != list(range(nic_count)):
            raise ValueError(f"pcie.complexes must place each of the {nic_count} NICs exactly once, got {nics}")
        for c in self.pcie.complexes:
            if c.numa >= self.cpu.numa_domains:
                raise ValueError(f"complex on NUMA domain {c.numa}, but the CPUs have {self.cpu.numa_domains}")
        if self.nvlink_domain is not None and self.nvswitch is None:
            raise ValueError("nvlink_domain needs the nvswitch section that describes the domain's switch chips")
        if (self.nvswitch or self.nvlink_bridges) and self.gpu.nvlink is None:
            raise ValueError(f"NVLink wiring given, but GPU {self.gpu.name} has no NVLink")
        self._check_link_budget()
        return self

    def _check_link_budget(self) -> None:
        if self.gpu.nvlink is None:
            return
        used = [sum(self.nvswitch.links_per_gpu) if self.nvswitch else 0 for _ in range(self.gpus)]
        for bridge in self.nvlink_bridges:
            for g in bridge.gpus:
                if not 0 <= g < self.gpus:
                    raise ValueError(f"nvlink bridge names GPU {g}, the node has {self.gpus}")
                used[g] += bridge.links
        worst = max(used)
        if worst > self.gpu.nvlink.links:
            raise ValueError(f"a GPU is wired with {worst} NVLinks but {self.gpu.name} has {self.gpu.nvlink.links}")
