"""What a group of ranks sees on the hardware: the only input the collective cost model takes from the topology.

:func:`simulator.collectives.place.place_group` summarises a group placed on the topology graph into a
:class:`GroupPlacement`; the cost model itself never looks at the graph.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.errors import UserError

GpuArch = Literal["sm70", "sm80", "sm86", "sm90", "sm100"]
IntraTransport = Literal["nvlink", "pcie_p2p", "shm"]
NetIssue = Literal["cpu_proxy", "ibgda"]


class GroupPlacement(BaseModel):
    """A communicator's view of the hardware: ranks, nodes, the links between them and who issues network work.

    All bandwidths are per direction, in bytes/s; latencies in seconds.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_ranks: int = Field(ge=1, description="ranks in the group")
    ranks_per_node: int = Field(ge=1, description="ranks of the group on each node (uniform); a node here is an NVLink "
                                                  "domain: the server, or a multi-node domain such as a GB200 NVL72 rack")
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
    domain_ranks: tuple[int, ...] = Field(
        default=(), description="ranks of the group on each NVLink domain it spans, given only when they differ "
        "(ranks_per_node is then the fewest; the per-node fields describe that domain): NCCL takes every channel count "
        "and bandwidth as the minimum over the ranks (src/init.cc, initTransportsRank: nChannels, bwIntra, bwInter "
        "min over allGather3Data's graphInfo), so the emptiest domain sets the pace; empty = the same on every one")

    @model_validator(mode="after")
    def _check(self) -> GroupPlacement:
        if self.domain_ranks and (len(self.domain_ranks) < 2 or sum(self.domain_ranks) != self.n_ranks
                                  or min(self.domain_ranks) != self.ranks_per_node):
            raise UserError(f"domain_ranks {self.domain_ranks} must span at least two domains, add up to n_ranks "
                            f"({self.n_ranks}) and have ranks_per_node ({self.ranks_per_node}) as their fewest",
                            key_path="placement.domain_ranks")
        if not self.domain_ranks and self.n_ranks % self.ranks_per_node:
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
        return len(self.domain_ranks) if self.domain_ranks else self.n_ranks // self.ranks_per_node

    @property
    def max_ranks_per_node(self) -> int:
        """The most ranks of the group on one domain (= ranks_per_node when even)."""
        return max(self.domain_ranks) if self.domain_ranks else self.ranks_per_node

    def with_ranks(self, n_ranks: int, ranks_per_node: int | None = None) -> GroupPlacement:
        """Same hardware, another group size, evenly spread (ranks_per_node defaults to min(old, n_ranks))."""
        rpn = ranks_per_node or min(self.ranks_per_node, n_ranks)
        return self.model_copy(update={"n_ranks": n_ranks, "ranks_per_node": rpn, "domain_ranks": ()})

    def with_shm(self) -> GroupPlacement:
        """The same node with P2P disabled (NCCL_P2P_DISABLE=1): traffic staged through host memory over PCIe."""
        pcie = self.pcie_bw_Bps or self.intra_bw_Bps
        return self.model_copy(update={"intra_transport": "shm", "intra_bw_Bps": pcie, "nvls": False})
