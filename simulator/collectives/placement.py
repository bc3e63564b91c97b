"""What a group of ranks sees on the hardware: the only input the collective cost model takes from the topology.

The topology package (``place_group(topology, gpu_ids)``) summarises a placed group into a :class:`GroupPlacement`;
this package never looks at the graph itself. For tests and quick studies, :func:`placement_for_datasheet` builds
one from vendor datasheet numbers (reference/hardware_specs.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.errors import UserError
from simulator.units.constants import GIGA, MICRO

GpuArch = Literal["sm70", "sm80", "sm86", "sm90", "sm100"]
IntraTransport = Literal["nvlink", "pcie_p2p", "shm"]
NetIssue = Literal["cpu_proxy", "ibgda"]


class GroupPlacement(BaseModel):
    """A communicator's view of the hardware: ranks, nodes, the links between them and who issues network work.

    All bandwidths are per direction, in bytes/s; latencies in seconds.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_ranks: int = Field(ge=1, description="ranks in the group")
    ranks_per_node: int = Field(ge=1, description="ranks of the group on each node (uniform)")
    gpu_arch: GpuArch = Field(description="SM generation; NCCL's constants are indexed by it")
    intra_transport: IntraTransport = Field(
        description="how two ranks of one node talk: NVLink P2P, PCIe P2P, or host shared memory (no P2P)")
    intra_bw_Bps: float = Field(gt=0, description="per-GPU unidirectional bandwidth to the other GPUs of the "
                                "node (NVLink: links x per-link rate; PCIe/SHM: the GPU's PCIe link); max-flow for a pair")
    intra_latency_s: float = Field(default=0.0, ge=0, description="one intra-node hop; a floor under NCCL's per-step latency")
    nvswitch: bool = Field(default=False, description="GPUs reach each other through NVSwitch")
    nvls: bool = Field(default=False, description="NVSwitch gen3+ with NVLink SHARP (in-switch reduction) usable")
    pcie_bw_Bps: float = Field(default=0.0, ge=0, description="GPU <-> NIC PCIe bandwidth per direction (datasheet)")
    nics_per_node: int = Field(default=0, ge=0, description="NICs per node usable by this group")
    nic_bw_Bps: float = Field(default=0.0, ge=0, description="line rate of one NIC per direction")
    net_latency_s: float = Field(default=0.0, ge=0, description="switch hops etc. added to NCCL's network step latency")
    nic_sharing: int = Field(default=1, ge=1, description="concurrent groups sharing the same NICs (divides NIC bandwidth)")
    fabric_oversubscription: float = Field(default=1.0, ge=1.0,
                                           description="fat-tree oversubscription seen by traffic crossing the spine")
    net_issue: NetIssue = Field(default="cpu_proxy", description="CPU proxy thread (IBRC) or GPU-initiated (IBGDA)")
    cpu_vendor: Literal["intel", "amd", "arm"] = Field(default="intel", description="selects NCCL's LL cap row and net overhead")

    @model_validator(mode="after")
    def _check(self) -> GroupPlacement:
        if self.n_ranks % self.ranks_per_node:
            raise UserError(f"n_ranks={self.n_ranks} is not a multiple of ranks_per_node={self.ranks_per_node}",
                            key_path="placement.ranks_per_node")
        if self.nvls and not (self.nvswitch and self.gpu_arch in ("sm90", "sm100")):
            raise UserError("nvls needs an NVSwitch gen3+ (nvswitch=true) and gpu_arch sm90 or newer",
                            key_path="placement.nvls")
        if self.n_nodes > 1 and (self.nics_per_node < 1 or self.nic_bw_Bps <= 0):
            raise UserError(f"a group spanning {self.n_nodes} nodes needs nics_per_node >= 1 and nic_bw_Bps > 0",
                            key_path="placement.nics_per_node")
        return self

    @property
    def n_nodes(self) -> int:
        return self.n_ranks // self.ranks_per_node

    def with_ranks(self, n_ranks: int, ranks_per_node: int | None = None) -> GroupPlacement:
        """Same hardware, another group size (ranks_per_node defaults to min(old, n_ranks))."""
        rpn = ranks_per_node or min(self.ranks_per_node, n_ranks)
        return self.model_copy(update={"n_ranks": n_ranks, "ranks_per_node": rpn})

    def with_shm(self) -> GroupPlacement:
        """The same node with P2P disabled (NCCL_P2P_DISABLE=1): traffic staged through host memory over PCIe."""
        pcie = self.pcie_bw_Bps or self.intra_bw_Bps
        return self.model_copy(update={"intra_transport": "shm", "intra_bw_Bps": pcie, "nvls": False})


# Datasheet numbers (reference/hardware_specs.md; NVIDIA DGX A100 / DGX H100 user guides).
_GBps = GIGA
_DATASHEET: dict[str, dict] = {
    # 8x A100 SXM4: NVLink3 12 links x 25 GB/s = 300 GB/s/dir through 6 NVSwitch gen2; 8x HDR 200 Gb/s; PCIe Gen4 x16.
    "dgx_a100_80gb": dict(gpus=8, gpu_arch="sm80", intra_transport="nvlink", intra_bw_Bps=300 * _GBps, nvswitch=True,
                          nvls=False, pcie_bw_Bps=31.5 * _GBps, nics_per_node=8, nic_bw_Bps=25 * _GBps,
                          cpu_vendor="amd"),
    # 8x H100 SXM5: NVLink4 18 links x 25 GB/s = 450 GB/s/dir, 4 NVSwitch gen3 with NVLS; 8x NDR 400 Gb/s; PCIe Gen5.
    "dgx_h100": dict(gpus=8, gpu_arch="sm90", intra_transport="nvlink", intra_bw_Bps=450 * _GBps, nvswitch=True,
                     nvls=True, pcie_bw_Bps=63 * _GBps, nics_per_node=8, nic_bw_Bps=50 * _GBps, cpu_vendor="intel"),
    # The measured machine (shared/calibration/h200x2): 2x H200 SXM, NV18 through NVSwitch, NVLS disabled, one VM.
    "h200_x2": dict(gpus=2, gpu_arch="sm90", intra_transport="nvlink", intra_bw_Bps=450 * _GBps, nvswitch=True,
                    nvls=False, pcie_bw_Bps=63 * _GBps, nics_per_node=0, nic_bw_Bps=0.0, cpu_vendor="intel"),
    # 4x RTX 3090 on PCIe Gen4 x16, GeForce: no P2P, NCCL uses host shared memory.
    "rtx3090_x4": dict(gpus=4, gpu_arch="sm86", intra_transport="shm", intra_bw_Bps=31.5 * _GBps, nvswitch=False,
                       nvls=False, pcie_bw_Bps=31.5 * _GBps, nics_per_node=0, nic_bw_Bps=0.0, cpu_vendor="amd"),
    # 2x A100 joined by NVLink bridges (NV12: 12 links x 25 GB/s), no NVSwitch (nccl-tests#178's machine).
    "a100_nv12_x2": dict(gpus=2, gpu_arch="sm80", intra_transport="nvlink", intra_bw_Bps=300 * _GBps, nvswitch=False,
                         nvls=False, pcie_bw_Bps=31.5 * _GBps, nics_per_node=0, nic_bw_Bps=0.0, cpu_vendor="amd"),
}
DATASHEET_SYSTEMS = tuple(_DATASHEET)


def placement_for_datasheet(system: str, n_ranks: int, ranks_per_node: int | None = None, **overrides) -> GroupPlacement:
    """A placement from datasheet numbers for one of :data:`DATASHEET_SYSTEMS`.

    Args:
        system: datasheet system name.
        n_ranks: group size.
        ranks_per_node: defaults to min(n_ranks, GPUs per node).
        overrides: any :class:`GroupPlacement` field (e.g. ``nvls=False``, ``net_issue="ibgda"``).
    """
    if system not in _DATASHEET:
        raise UserError(f"unknown datasheet system {system!r}; accepted: {', '.join(DATASHEET_SYSTEMS)}",
                        key_path="system")
    spec = dict(_DATASHEET[system])
    gpus = spec.pop("gpus")
    rpn = ranks_per_node or min(n_ranks, gpus)
    if rpn > gpus:
        raise UserError(f"{system} has {gpus} GPUs per node, asked for {rpn}", key_path="ranks_per_node")
    spec.update(n_ranks=n_ranks, ranks_per_node=rpn, intra_latency_s=0.0 * MICRO)
    spec.update(overrides)
    if spec["n_ranks"] // spec["ranks_per_node"] > 1 and spec["nics_per_node"] == 0:
        raise UserError(f"{system} is a single-node machine; {n_ranks} ranks need more than {gpus} per node",
                        key_path="ranks")
    return GroupPlacement(**spec)
