"""The one labelled table of coefficients behind the collective cost model.

Every entry names its source: an NCCL file at tag v2.30.7-1 (commit 73cf1122), a measurement (issue or file), or
"assumption" with the reasoning. Print it with :func:`format_coefficients`; override any entry with
``DEFAULT_COEFFICIENTS.model_copy(update={...})``; a calibration (calibration.py) overlays fitted values per link
class and protocol on top of it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PROTOCOLS = ("ll", "ll128", "simple")


class Coefficients(BaseModel):
    """Coefficients of the model; the ``description`` of each field is its source."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- link efficiencies: effective payload rate / datasheet line rate ----
    nvlink_efficiency: dict[str, float] = Field(
        default={"sm70": 20.0 / 25.0, "sm80": 20.0 / 25.0, "sm86": 12.0 / 14.0625, "sm90": 20.6 / 25.0,
                 "sm100": 40.1 / 50.0},
        description="NCCL src/graph/topo.h SMxx_NVLINK_BW (20, 20, 12, 20.6, 40.1 GB/s per link) over the per-link line "
                    "rate (25; GA102 bridge 14.0625; NVLink5 50 GB/s): 128 B payload per SM store, sjeaugey nccl-tests#149")
    pcie_p2p_efficiency: float = Field(
        default=26.3 / 31.5, description="measured GPU-GPU through a PCIe Gen4 switch 26.3 of 31.5 GB/s "
                                          "(project hardware notes; no public source)")
    shm_efficiency: float = Field(
        default=28.66 / 63.0, description="measured 2x H200 NCCL_P2P_DISABLE=1 all_reduce 28.66 GB/s busbw at 64 MiB "
                                          "over PCIe Gen5 x16 63 GB/s (simulator/validation/data/h200x2/all_reduce_perf.shm.txt)")
    nic_efficiency: float = Field(
        default=0.94, description="NDR 400G measures 46-48 GB/s per NIC of 50 (AddyLaddy, nccl-tests#290): 47/50")
    pcie_nic_efficiency: float = Field(
        default=24.0 / 31.5, description="NCCL src/graph/topo.cc PCIe bw = width*speed/80 (Gen4 x16 = 24 GB/s) over "
                                         "the 31.5 GB/s datasheet rate")
    net_channel_bw_Bps: float = Field(
        default=20.6e9, description="per-channel (one CTA + proxy) network throughput. FITTED: nccl#1221 measures a "
                                    "330 GB/s ring on 2x8 H100 with 16 channels (330/16); consistent with "
                                    "nccl-tests#309 (NCCL_MIN_CTAS=24 lifts it above 380 GB/s)")
    net_channels_per_nic: int = Field(
        default=2, description="NCCL search.cc puts one ring channel per NIC; connect.cc ncclTopoPostset doubles "
                               "channels at runtime")
    intra_channels: dict[str, int] = Field(
        default={"nvlink": 24, "pcie_p2p": 2, "shm": 2},
        description="runtime channels: DGX A100 'Channel xx/24' (nccl-tests#100), DGX H100 12 graph ch x2 "
                    "(nccl#1197); PCIe/SHM 1 graph channel x2 (NCCL shm tuning table: 2 x 20 GB/s)")
    p2p_ll_threshold_bytes: int = Field(
        default=16384, description="NCCL src/enqueue.cc NCCL_P2P_LL_THRESHOLD: point-to-point sends up to 16 KiB use "
                                   "LL, larger ones Simple; NCCL_PROTO does not apply to p2p")
    p2p_efficiency: float = Field(
        default=195.0 / 240.0, description="8x A100 sendrecv 195 GB/s busbw at 1 GB (li-plus/playground cuda/nccl.md) "
                                           "over NCCL's 240 GB/s effective NVLink bandwidth")

    # ---- protocols ----
    protocol_efficiency: dict[str, float] = Field(
        default={"ll": 0.5, "ll128": 0.92, "simple": 1.0},
        description="NCCL tuning.cc v2.30.7: ring LL busBw*0.5 (8 B data per 16 B line), LL128 *0.92 (~120/128)")
    ll_max_bw_GBps: dict[str, list[float]] = Field(
        default={"sm70": [39.0, 39.0, 20.4], "sm80": [87.7, 22.5, 19.0], "sm86": [87.7, 22.5, 19.0],
                 "sm90": [141.0, 45.0, 35.0], "sm100": [282.0, 90.0, 70.0]},
        description="NCCL tuning.cc llMaxBws (1 node / 2 nodes / >2 nodes), ring LL bus bandwidth cap")
    ring_pipeline_slack: float = Field(
        default=0.5, description="ASSUMPTION: each loop of a ring costs its nsteps chunk times plus one slice of "
                                 "fill/drain; NCCL chunks hold 2 slices (collectives.h ALLREDUCE_CHUNKSTEPS/"
                                 "SLICESTEPS = 4/2), so efficiency = nsteps/(nsteps+0.5). Checked on the H200 "
                                 "all_reduce vs all_gather logs and the 2- vs 8-rank A100 rows")

    # ---- algorithms ----
    tree_efficiency: float = Field(default=0.92, description="NCCL tuning.cc: tree busBw*0.92")
    tree_ll_factor: float = Field(default=1.0 / 3.8, description="NCCL tuning.cc: tree LL busBw/3.8")
    tree_ll128_factor: list[float] = Field(default=[7.0 / 9.0, 120.0 / 128.0],
                                           description="NCCL tuning.cc: tree LL128 7/9 (1 node), 120/128 (multi-node)")
    per_ch_max_tree_bw_GBps: dict[str, list[float]] = Field(
        default={"sm70": [26.5, 18.5, 10.0], "sm80": [24.0, 23.6, 17.8], "sm86": [24.0, 23.6, 17.8],
                 "sm90": [38.7, 41.4, 36.0], "sm100": [70.0, 42.8, 24.0]},
        description="NCCL tuning.cc perChMaxTreeBws (1 / 2 / >2 nodes)")
    nvls_efficiency: dict[str, float] = Field(default={"sm90": 0.85, "sm100": 0.74},
                                              description="NCCL tuning.cc nvlsEfficiency (Hopper 0.85, Blackwell 0.74)")
    per_ch_max_nvls_tree_bw_GBps: dict[str, list[float]] = Field(
        default={"sm90": [0.0, 57.7, 45.5], "sm100": [0.0, 96.0, 80.0]},
        description="NCCL tuning.cc perChMaxNVLSTreeBws (1 / 2 / >2 nodes)")
    nvls_max_arity: int = Field(
        default=32, description="NCCL src/include/device.h NCCL_MAX_NVLS_ARITY 32: the NVLS graph has min(32, GPUs) "
                                "channels, one head each (src/graph/search.cc ncclTopoCompute; 8 on DGX H100, "
                                "nccl#1197 'Pattern 5, nChannels 8'), and NVLS runs all_gather / reduce_scatter only "
                                "with at most 32 local ranks (src/enqueue.cc)")
    nvls_kernel_channels: dict[str, int] = Field(
        default={"sm90": 16, "sm100": 24},
        description="NCCL src/transport/nvls.cc@73cf1122 (v2.30.7) NVLS_NCHANNELS_SM90 16, NVLS_NCHANNELS_SM100_NVL 24 "
                    "(one NVLink domain): CTAs the NVLS all_reduce kernel runs (enqueue.cc topoGetAlgoInfo)")
    nvls_chunk_bytes: int = Field(default=131072, description="NCCL nvls.cc NCCL_NVLS_CHUNKSIZE default 128 KiB")
    nvls_tree_channels: dict[str, int] = Field(
        default={"sm90": 16, "sm100": 32},
        description="NCCL nvls.cc NVLS_NCHANNELS_SM90 16, NVLS_NCHANNELS_SM100 32 (more than one node; the SM100 "
                    "NVLSTree tuner picks 24 on some NIC speeds / ppn, not modelled)")
    nvls_fill_loops: float = Field(
        default=2.0, description="**assumption**: the one-domain NVLS all_reduce is a 3-stage pipeline per loop "
                                 "(scatter into the multicast buffer, ld_reduce + multimem.st by the head, gather; "
                                 "src/device/all_reduce.h), so one loop fills and one drains")
    pat_efficiency: float = Field(default=0.75, description="NCCL tuning.cc: PAT busBw*0.75 (since 2.24)")
    pat_latency_per_rank_us: float = Field(default=2.8, description="NCCL tuning.cc PAT 'still a linear part' 2.8 us/rank")

    def nvls_tree_max_chunk_bytes(self, nodes: int) -> int:
        """nvls.cc ncclNvlsTuning fallback treeMaxChunkSize: 64 KiB from 4 nodes up, else the NVLS chunk (the SM100
        tuner's 64 / 256 KiB choices for some NIC speeds and PCIe paths are not modelled)."""
        return 65536 if nodes >= 4 else self.nvls_chunk_bytes

    # ---- latencies (us) ----
    base_latency_us: dict[str, list[float]] = Field(
        default={"tree": [6.8, 14.0, 8.4], "ring": [6.6, 14.0, 8.4], "nvls": [0.0, 0.0, 0.0],
                 "nvls_tree": [0.0, 0.0, 0.0], "pat": [8.0, 8.0, 8.0]},
        description="NCCL tuning.cc baseLat [LL, LL128, Simple], v2.30.7")
    hw_latency_us: dict[str, dict[str, list[float]]] = Field(
        default={
            "nvlink": {"tree": [0.6, 1.25, 4.0], "ring": [0.6, 1.9, 3.4], "nvls": [0.0, 0.0, 25.0],
                       "nvls_tree": [0.0, 0.0, 25.0], "pat": [0.0, 0.0, 4.0]},
            "pci": {"tree": [1.0, 1.9, 4.0], "ring": [1.0, 2.5, 5.7], "nvls": [0.0, 0.0, 0.0],
                    "nvls_tree": [0.0, 0.0, 0.0], "pat": [0.0, 0.0, 4.0]},
            "net": {"tree": [5.0, 8.5, 14.0], "ring": [2.7, 4.0, 14.0], "nvls": [0.0, 0.0, 18.0],
                    "nvls_tree": [0.0, 0.0, 20.9], "pat": [0.0, 0.0, 14.0]},
        },
        description="NCCL tuning.cc hwLat[NVLINK|PCI|NET][algo] [LL, LL128, Simple], v2.30.7")
    net_overhead_us: dict[str, float] = Field(
        default={"intel": 1.0, "amd": 2.0, "arm": 1.0},
        description="NCCL tuning.cc netOverhead per CPU vendor (x3 for Simple), floor of intra step latency multi-node")

    # ---- network issue: message rate per NIC ----
    message_rate_per_s: dict[str, float] = Field(
        default={"cpu_proxy": 50e9 / 32768, "ibgda": 50e9 / 8192},
        description="NVSHMEM issue #8 (2x H800, one 50 GB/s NIC): put bandwidth saturates at 32 KiB messages via the "
                    "CPU proxy and 8 KiB with IBGDA -> ~1.5 M and ~6.1 M messages/s per NIC")
    net_chunk_bytes: int = Field(default=128 * 1024,
                                 description="NCCL init.cc p2p network chunk size 128 KiB (one work request each)")


DEFAULT_COEFFICIENTS = Coefficients()


def format_coefficients(coefficients: Coefficients = DEFAULT_COEFFICIENTS) -> str:
    """The table as text: one line per entry with its value and its source."""
    lines = []
    for name, field in Coefficients.model_fields.items():
        lines.append(f"{name} = {getattr(coefficients, name)!r}")
        lines.append(f"    source: {field.description}")
    return "\n".join(lines)
