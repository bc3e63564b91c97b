"""Device memory NCCL holds on each GPU: its communicators, their channels and their connections' buffers.

Sizes are NCCL's (read in NVIDIA/nccl at v2.28.9-1, the version measured in simulator/validation/data/h200x2_nccl;
unchanged at v2.30.7-1), with NCCL's defaults (cuMem on, runtime connection, NVLS where the
NVSwitch supports it, no user buffer registration). What a GPU holds is the sum of

* ``process``: once per process (CUDA module and stack of NCCL's kernels, proxy state): FITTED below;
* per communicator, at init: 3 device allocations per channel (``src/channel.cc`` initChannel: the shared peer
  array, the channel's peer pointers, the ring's user ranks), each a cuMem allocation rounded up to the 2 MiB
  granularity (``src/include/alloc.h`` ncclCuMemAlloc), on every channel the communicator may use
  (``src/graph/paths.cc`` ncclTopoComputeP2pChannels initialises p2pnChannels = pow2Up(collective channels)), plus a
  FITTED remainder;
* per communicator that runs ring collectives (all-reduce, all-gather, reduce-scatter): on each collective channel
  one send and one receive connection (``src/transport/generic.cc`` ncclTransportRingConnect; trees over the
  same peers reuse them, across nodes they add connections not counted here);
* per communicator that runs point-to-point (all-to-all, pipeline and ring-attention send/recv): per peer, on
  ``p2pnChannelsPerPeer`` channels, one send and one receive connection (``src/enqueue.cc`` marks every channel of
  a peer at its first send/recv; connector index 1, apart from the collectives' index 0).

A connection's buffers (``src/transport/p2p.cc`` p2pSendSetup / p2pRecvSetup; ``src/init.cc`` DEFAULT_*BUFFSIZE):
the receive side holds LL (512 KiB), LL128 (4.6875 MiB) and, with P2P write, SIMPLE (NCCL_BUFFSIZE 4 MiB) after a
4 KiB header, the send side a 4 KiB header plus, with P2P read (NVLink), SIMPLE; each side is rounded up to
CUDA_IPC_MIN = 2 MiB (``src/include/comm.h``): 2 + 10 MiB (write) or 6 + 6 MiB (read), 12 MiB either way. Over
the network with GPUDirect RDMA (``src/transport/net.cc`` sendProxyConnect / recvProxyConnect) ring connections
keep LL128 + SIMPLE (send) and LL + LL128 + SIMPLE (receive) on the GPU, 10 + 10 MiB; point-to-point over the
network shares one pool per direction per communicator (p2pnChannels x NCCL_SHARED_STEPS 16 x the 128 KiB
NCCL_P2P_NET_CHUNKSIZE). Over shared host memory (PCIe without peer access) the buffers live in host memory.

Channel counts are the collective model's (``simulator/collectives/coefficients.py`` ``intra_channels``, 24 on an
NVLink node, 2 over PCIe; 2 per NIC across nodes, ``net_channels_per_nic``); a test keeps the copies below equal
to it. Point-to-point channels per peer (``src/graph/paths.cc`` ncclTopoGetNchannels): 2 x the NVLinks between
two GPUs, 2 over PCIe, 2 per network peer (halved while 2 x ranks > 4 x p2pnChannels); the communicator takes
the smallest over its peers, as a power of two, at most p2pnChannels.

NVLS (NVLink SHARP, ``src/transport/nvls.cc``), NCCL's default (NCCL_NVLS_ENABLE 2) on an NVSwitch whose
fabric supports multicast, with compute capability 9.0 or newer (profiles: ``nvswitch.nvls``; ``system.nvls: false``
turns it off, as NCCL_NVLS_ENABLE=0): ncclNvlsBufferSetup, at the first collective that picks NVLS (runtime
connection), allocates nvlsChannels x 2 (reduce and broadcast) x NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8 x nHeads
on each GPU, nHeads = the GPUs of the communicator in one NVLink domain (at most NCCL_MAX_NVLS_ARITY 32);
nvlsChannels is 16 on Hopper (NVLS_NCHANNELS_SM90), on Blackwell 24 inside one host and 32 across hosts
(NVLS_NCHANNELS_SM100_NVL / _SM100): 256 MiB for 8 GPUs of an HGX H100. At init ncclNvlsSetup adds a credit
buffer (channels x 2 x 64 B x nHeads), one 2 MiB granule. The multicast mappings bind that memory, they hold no
copy of their own. NVLS can run all-reduce, reduce-scatter and all-gather inside one NVLink domain, across domains
only all-reduce (NVLS-tree, which allocates the same intra-domain buffers); the buffers are counted for a
communicator with at least two GPUs in this GPU's domain whose traffic includes a large all-reduce (TP without
sequence parallelism, DDP's gradient all-reduce over data or expert-data parallel ranks, the tied embedding's and
DualPipe's gradient all-reduces): that is what the collective model (``simulator/collectives``, as NCCL's
tuner) prices with NVLS or NVLS-tree on Hopper, from about 8 MB, while it keeps reduce-scatter and all-gather on
rings there (tests/unit/test_nccl_memory.py checks both) and the world communicator's barrier never picks NVLS, so
never allocates them.

With a MoE backend that holds DeepEP's buffers (``rp.moe_backend.buffers``: DeepEP normal, low-latency) the EP group's tokens move through DeepEP's
buffers, added as one more entry (:mod:`simulator.memory.deepep`), and its NCCL communicator only runs the ring
collective of the Buffer's set-up; otherwise an EP all-to-all is NCCL's point-to-point to every peer.

Not counted: CollNet buffers, tree connections across nodes, PXN proxies' buffers on a peer GPU, user-registered
buffers, Transformer Engine userbuffers; the world communicator is counted as connected by one ring collective (a
barrier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from simulator.caching import IdentityCache, memo
from simulator.hardware.cluster import ClusterSpec
from simulator.memory.deepep import deepep_bytes
from simulator.plan.ranks import RankGrid
from simulator.plan.resolved import ResolvedPlan
from simulator.units.constants import KiB, MiB

# ---- NCCL's constants (NVIDIA/nccl v2.28.9-1) ----------------------------------------------------------------
NCCL_STEPS = 8                                      # src/include/device.h
LL_BUFF_BYTES = 8 * 512 * NCCL_STEPS * 16           # LL_LINES_PER_THREAD x LL_MAX_NTHREADS x steps x 16 B line
LL128_BUFF_BYTES = 120 * 640 * NCCL_STEPS * 8       # LL128_ELEMS_PER_THREAD x LL128_MAX_NTHREADS x steps x 8 B
SIMPLE_BUFF_BYTES = 4 * MiB                         # src/init.cc DEFAULT_BUFFSIZE (NCCL_BUFFSIZE)
HEADER_BYTES = 4 * KiB                              # src/include/comm.h ncclSendMem / ncclRecvMem (MEM_ALIGN)
GRANULE_BYTES = 2 * MiB                             # src/include/comm.h CUDA_IPC_MIN; cuMem granularity on Hopper
INIT_ALLOCS_PER_CHANNEL = 3                         # src/channel.cc initChannel: 2 peer arrays, ring ranks
NET_P2P_CHUNK_BYTES = 128 * KiB                     # src/init.cc NCCL_P2P_NET_CHUNKSIZE
NET_SHARED_STEPS = 16                               # src/transport/net.cc NCCL_SHARED_STEPS
P2P_MAX_CHANNELS = 64                               # src/include/device.h MAXCHANNELS
NVLS_CHUNK_BYTES = 128 * KiB                        # src/transport/nvls.cc NCCL_NVLS_CHUNKSIZE
NVLS_CREDIT_BYTES = 64                              # src/transport/nvls.cc ncclNvlsSetup memSize
NVLS_MAX_ARITY = 32                                 # src/include/device.h NCCL_MAX_NVLS_ARITY
NVLS_CHANNELS = {9: (16, 16), 10: (24, 32)}         # src/transport/nvls.cc NVLS_NCHANNELS_SM90; SM100_NVL, SM100:
#                                                     by compute capability major, (inside one host, across hosts)

# ---- the collective model's channel counts (simulator/collectives/coefficients.py; a test keeps them equal) ------
INTRA_CHANNELS = {"nvlink": 24, "pcie_p2p": 2, "shm": 2}
NET_CHANNELS_PER_NIC = 2

# ---- FITTED to simulator/validation/data/h200x2_nccl (2x H200, NCCL 2.28.9; docs/memory.md "NCCL") ---------------
PROCESS_BYTES = 354 * MiB
"""Once per process. FITTED: the first communicator's init and first all-reduce add 366 + 474 = 840 MiB, of which
the model's communicator (198 MiB) and ring connections (288 MiB) leave 354 MiB (kernels' module and stack: the
first all-reduce adds 186 MiB beyond its connections, a second communicator's does not)."""
COMM_EXTRA_BYTES = 6 * MiB
"""Per communicator beyond its channels' allocations. FITTED: a second communicator with one all-reduce adds
486 MiB = 288 MiB of ring connections + 32 channels x 6 MiB + 6 MiB."""


def _granules(n_bytes: float) -> float:
    """``n_bytes`` rounded up to NCCL's 2 MiB allocation granule."""
    return -(-n_bytes // GRANULE_BYTES) * GRANULE_BYTES


def p2p_connection_bytes(read: bool = True) -> float:
    """One send plus one receive connection over CUDA P2P (``src/transport/p2p.cc``): 12 MiB, read or write."""
    if read:
        return _granules(HEADER_BYTES + SIMPLE_BUFF_BYTES) + _granules(HEADER_BYTES + LL_BUFF_BYTES + LL128_BUFF_BYTES)
    return _granules(HEADER_BYTES) + _granules(HEADER_BYTES + LL_BUFF_BYTES + LL128_BUFF_BYTES + SIMPLE_BUFF_BYTES)


def net_connection_bytes() -> float:
    """One send plus one receive ring connection over the network with GPUDirect RDMA (``src/transport/net.cc``):
    LL128 + SIMPLE on the sending GPU, LL + LL128 + SIMPLE on the receiving one, each rounded to 2 MiB: 20 MiB."""
    return _granules(LL128_BUFF_BYTES + SIMPLE_BUFF_BYTES) + \
        _granules(LL_BUFF_BYTES + LL128_BUFF_BYTES + SIMPLE_BUFF_BYTES)


def _pow2_up(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class NcclFabric:
    """What NCCL's channel counts read from the cluster: the transport between GPUs of one NVLink domain (a node,
    or a multi-node NVLink rack), NVLinks between two of its GPUs, GPUs and NICs per domain; ``nvls``: the GPUs'
    compute capability major when their NVSwitch runs NVLS (9 Hopper, 10 Blackwell), else 0; GPUs per host."""

    intra: str
    nvlinks: int
    domain_gpus: int
    nics_per_domain: int
    nvls: int = 0
    host_gpus: int = 0

    @classmethod
    def of(cls, cluster: ClusterSpec) -> NcclFabric:
        node = cluster.node
        if node.nvswitch is not None:
            intra, links = "nvlink", sum(node.nvswitch.links_per_gpu)
        elif node.nvlink_bridges:
            intra, links = "nvlink", min(b.links for b in node.nvlink_bridges)
        else:
            intra, links = ("pcie_p2p" if node.pcie.gpu_p2p else "shm"), 0
        nics = (node.nics.count if node.nics else 0) * cluster.domain_nodes
        major = node.gpu.compute_capability_version[0]
        nvls = major if node.nvswitch is not None and node.nvswitch.nvls and major >= 9 else 0
        return cls(intra, links, cluster.domain_gpus, nics, nvls, node.gpus)


@dataclass(frozen=True)
class Communicator:
    """One NCCL communicator seen from one GPU: ``ranks`` over ``domains`` NVLink domains, ``local`` of them in
    this GPU's domain; whether it runs ring collectives, and its point-to-point peers (``peers``: how many this
    GPU sends to and receives from, ``remote`` of them in other domains)."""

    name: str
    ranks: int
    domains: int
    local: int
    ring: bool = False
    peers: int = 0
    remote: int = 0
    nvls: bool = False
    """whether it runs a large all-reduce with two or more GPUs in this GPU's domain: NVLS (or NVLS-tree) where
    the fabric has it (module docstring)"""


@dataclass(frozen=True)
class NcclBytes:
    """NCCL bytes per GPU by part: ``process`` once, then per communicator (name -> bytes)."""

    process: float
    communicators: tuple[tuple[str, float], ...]

    @property
    def total(self) -> float:
        return self.process + sum(b for _, b in self.communicators) if self.communicators else 0.0


def collective_channels(comm: Communicator, fabric: NcclFabric) -> int:
    """Collective (ring) channels of ``comm``: the collective model's per-transport count inside one domain, 2 per
    NIC its local ranks use across domains (one NIC per GPU up to the domain's NICs)."""
    if comm.domains == 1:
        return INTRA_CHANNELS[fabric.intra]
    nics = max(1, min(fabric.nics_per_domain, fabric.nics_per_domain * comm.local // max(1, fabric.domain_gpus)))
    return NET_CHANNELS_PER_NIC * nics


def p2p_channels(comm: Communicator, fabric: NcclFabric) -> tuple[int, int]:
    """(p2pnChannels, p2pnChannelsPerPeer) of ``comm`` (``src/graph/paths.cc`` ncclTopoComputeP2pChannels)."""
    coll = min(collective_channels(comm, fabric), P2P_MAX_CHANNELS)
    total = _pow2_up(coll)
    per_peer = coll
    if comm.domains > 1:
        net = 2
        while net * comm.ranks > total * 4 and net > 1:
            net //= 2
        per_peer = min(per_peer, net)
    if comm.local > 1:
        per_peer = min(per_peer, 2 * fabric.nvlinks if fabric.intra == "nvlink" else 2)
    return total, min(_pow2_up(per_peer), total)


def nvls_bytes(comm: Communicator, fabric: NcclFabric) -> float:
    """NVLS buffers of ``comm`` on one GPU (module docstring): the credit buffer and nvlsChannels x 2 x 128 KiB x 8
    steps x nHeads, each rounded up to the 2 MiB granule; 0 where the fabric has no NVLS, the communicator has
    fewer than two GPUs in this GPU's domain or its collectives do not pick NVLS."""
    if not (comm.nvls and fabric.nvls and comm.local >= 2):
        return 0.0
    major = min(fabric.nvls, max(NVLS_CHANNELS))
    channels = NVLS_CHANNELS[major][comm.ranks > fabric.host_gpus]
    heads = min(comm.local, NVLS_MAX_ARITY)
    return (_granules(channels * 2 * NVLS_CREDIT_BYTES * heads)
            + _granules(channels * 2 * NVLS_CHUNK_BYTES * NCCL_STEPS * heads))


def communicator_bytes(comm: Communicator, fabric: NcclFabric) -> float:
    """Device bytes of ``comm`` on one GPU (module docstring): init, ring connections, point-to-point, NVLS."""
    if comm.ranks < 2:
        return 0.0
    total, per_peer = p2p_channels(comm, fabric)
    out = COMM_EXTRA_BYTES + INIT_ALLOCS_PER_CHANNEL * GRANULE_BYTES * total
    intra = 0.0 if fabric.intra == "shm" else p2p_connection_bytes()
    if comm.ring:
        # per channel, one hop in and one out of each domain go over the network, spread over its local ranks
        net_share = 0.0 if comm.domains == 1 else 1.0 / comm.local
        out += collective_channels(comm, fabric) * ((1 - net_share) * intra + net_share * net_connection_bytes())
    if comm.peers:
        out += (comm.peers - comm.remote) * per_peer * intra
        if comm.remote:
            out += 2 * total * NET_SHARED_STEPS * NET_P2P_CHUNK_BYTES
    return out + nvls_bytes(comm, fabric)


def _shape(name: str, group: tuple[int, ...], rank: int, per_domain: int, ring: bool, peers: tuple[int, ...] = (),
           all_reduce: bool = False) -> Communicator:
    """``ring``: it runs ring collectives; ``all_reduce``: they include a large all-reduce, which picks NVLS (or
    NVLS-tree across domains) where two of its GPUs share this GPU's domain (module docstring)."""
    domain = rank // per_domain
    peers = tuple(sorted(set(peers) - {rank}))
    domains = len({r // per_domain for r in group})
    local = sum(1 for r in group if r // per_domain == domain)
    return Communicator(name, len(group), domains, local, ring, len(peers),
                        sum(1 for r in peers if r // per_domain != domain),
                        nvls=all_reduce and local >= 2)


class CommunicatorInputs(NamedTuple):
    """What :func:`stage_communicators` reads of a plan for one pipeline stage, and nothing else: the rank grid
    (rank order and grid sizes), the stage, and the switches that decide which communicators exist and how they
    connect. Plans of a search that differ only in micro-batch, sharding (beyond DDP or not) or recompute share it."""

    grid: RankGrid
    stage: int
    pp: int
    interleaved: bool          # vpp > 1: the pipeline ring wraps around
    sp: bool                   # TP by reduce-scatter / all-gather (else all-reduce)
    cp_comm: str
    ddp: bool                  # gradients all-reduced (ZeRO stage 0), else reduce-scattered
    eager: bool                # plain PyTorch: a data-parallel group spanning every GPU is the world communicator
    moe: bool
    deepep_buffers: bool       # the MoE backend moves tokens through DeepEP's own buffers
    tied_embeddings: bool
    last_stage_rank: int
    mirrored: bool             # DualPipe: the two copies of a stage all-reduce their gradients


def communicator_inputs(rp: ResolvedPlan, stage: int) -> CommunicatorInputs:
    """The :class:`CommunicatorInputs` of stage ``stage`` of ``rp``."""
    p = rp.parallel
    return CommunicatorInputs(rp.rank_grid, stage, p.pp, p.vpp > 1, p.sp, p.cp_comm, rp.recipe.stage == 0,
                              rp.recipe.eager, rp.model.moe is not None, rp.moe_backend.deepep_buffers,
                              rp.model.tied_embeddings, rp.last_stage_rank, rp.schedule.mirrored)


def plan_communicators(rp: ResolvedPlan, stage: int, per_domain: int) -> tuple[Communicator, ...]:
    """:func:`stage_communicators` of stage ``stage`` of ``rp``."""
    return stage_communicators(communicator_inputs(rp, stage), per_domain)


def stage_communicators(c: CommunicatorInputs, per_domain: int) -> tuple[Communicator, ...]:
    """The communicators a GPU of pipeline stage ``c.stage`` uses in a training step (the traffic of
    :mod:`simulator.traffic`): TP, CP (ring send/recv or all-gather), Ulysses and EP all-to-all, expert TP, the
    gradient reduction over dp x cp x ulysses and over expert-dp, pipeline send/recv, the tied embedding's
    all-reduce, DualPipe's copy-gradient all-reduce between mirrored ranks, and the world communicator (one barrier;
    under ``framework: pytorch`` the data-parallel group when it spans every GPU)."""
    stage, pp, grid = c.stage, c.pp, c.grid
    rank = grid.group_of("pp", 0)[stage]
    out = []

    def add(name: str, dim: str, ring: bool, a2a: bool = False, neighbours: bool = False,
            all_reduce: bool = False) -> None:
        group = grid.group_of(dim, rank)
        if len(group) < 2:
            return
        i = group.index(rank)
        peers = group if a2a else (group[(i + 1) % len(group)], group[i - 1]) if neighbours else ()
        out.append(_shape(name, group, rank, per_domain, ring, peers, all_reduce))

    add("tp", "tp", ring=True, all_reduce=not c.sp)
    add("cp", "cp", ring=c.cp_comm == "all_gather", neighbours=c.cp_comm == "p2p")
    add("ulysses", "ulysses", ring=False, a2a=True)
    add("dp", "dp_cp", ring=True, all_reduce=c.ddp)
    if c.moe:
        # DeepEP moves the tokens through its own buffers (simulator.memory.deepep); its Buffer's set-up gathers
        # the peers' handles over the EP group (dist.all_gather_object), a ring collective on NCCL
        add("ep", "ep", ring=c.deepep_buffers, a2a=not c.deepep_buffers)
        add("etp", "etp", ring=True)
        add("edp", "edp", ring=True, all_reduce=c.ddp)
    if pp > 1:
        group = grid.group_of("pp", rank)
        peers = [group[(stage + 1) % pp]] if stage + 1 < pp or c.interleaved else []
        peers += [group[(stage - 1) % pp]] if stage > 0 or c.interleaved else []
        out.append(_shape("pp", group, rank, per_domain, False, tuple(peers)))
        last = c.last_stage_rank         # DualPipeV ends its V on rank 0: no tied-embedding sync there
        if c.tied_embeddings and last > 0 and stage in (0, last):
            out.append(_shape("embedding", (group[0], group[last]), rank, per_domain, True, all_reduce=True))
        if c.mirrored:                   # the two copies of a stage all-reduce their gradients (traffic.step)
            out.append(_shape("pp_mirror", tuple(sorted((group[stage], group[pp - 1 - stage]))), rank, per_domain,
                              True, all_reduce=True))
    # the default process group; plain PyTorch (DDP, FSDP) reduces gradients on it, so a data-parallel group that
    # spans every GPU is that communicator, not a second one
    n = grid.world_size
    if n > 1 and not (c.eager and any(x.name == "dp" and x.ranks == n for x in out)):
        first = rank // per_domain * per_domain       # ranks 0..n-1 fill the domains in order
        out.append(Communicator("world", n, -(-n // per_domain), min(per_domain, n - first), ring=True))
    return tuple(out)


def nccl_bytes(rp: ResolvedPlan, cluster: ClusterSpec, stage: int) -> NcclBytes:
    """The communication libraries' device bytes on a GPU of pipeline stage ``stage`` of ``rp`` on ``cluster``:
    NCCL's communicators (module docstring) and, where the stage's MoE layers move tokens with DeepEP (``rp.moe_backend``
    with DeepEP's buffers), DeepEP's buffers as one more entry, ``deepep`` (:mod:`simulator.memory.deepep`).

    Kept by what :func:`stage_communicators` reads (:class:`CommunicatorInputs`), so plans of a search that differ
    only in micro-batch, sharding or recompute share one evaluation (the DeepEP entry is computed apart: its
    low-latency buffer follows the micro-batch)."""
    fabric = _fabric((cluster,))
    hit = _communicator_bytes(communicator_inputs(rp, stage), fabric)
    if rp.moe_backend.deepep_buffers and any(map(rp.model.is_moe_layer, rp.stage_layers[stage])):
        deepep = deepep_bytes(rp)
        if deepep:
            return NcclBytes(hit.process, (*hit.communicators, ("deepep", deepep)))
    return hit


@memo(maxsize=8192)
def _communicator_bytes(inputs: CommunicatorInputs, fabric: NcclFabric) -> NcclBytes:
    return _nccl_bytes(stage_communicators(inputs, fabric.domain_gpus), fabric)


#: :class:`NcclFabric` by the identity of the (frozen) cluster spec it was read from (hashing the spec costs more)
_fabric = IdentityCache(lambda clusters, _: NcclFabric.of(clusters[0]), maxsize=64)


@memo(maxsize=4096)
def _nccl_bytes(comms: tuple[Communicator, ...], fabric: NcclFabric) -> NcclBytes:
    parts = tuple((c.name, communicator_bytes(c, fabric)) for c in comms)
    return NcclBytes(PROCESS_BYTES if parts else 0.0, parts)
