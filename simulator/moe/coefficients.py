"""The labelled coefficients of the expert-parallel communication model.

Each field's ``description`` is its source. FITTED entries say on which published row they were fitted; the
validation tests (tests/validation/test_deepep.py) report those rows separately from the rows they predict.
Override any entry with ``DEFAULT_MOE_COEFFICIENTS.model_copy(update={...})``. Network bandwidth, NIC efficiency and
message rates per issue mode come from :mod:`simulator.collectives` (one table for the whole simulator).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MoeCoefficients(BaseModel):
    """Coefficients of the dispatch/combine kernels."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- payloads ----
    fp8_scale_block: int = Field(
        default=128, ge=1, description="FP8 dispatch carries one fp32 scale per 128 channels (DeepEP "
                                        "per_token_cast_to_fp8; DeepSeek-V3 report §3.3 1x128 tiles)")
    fp8_scale_bytes: int = Field(default=4, ge=0, description="fp32 scale factor (DeepEP tests: hidden/128*4 bytes)")
    ll_message_header_bytes: int = Field(
        default=16, ge=0, description="per-message source info of DeepEP low-latency dispatch "
                                      "(test_low_latency.py counts hidden + hidden/128*4 + 16 bytes per FP8 token)")

    # ---- DeepEP normal kernels ----
    normal_nvlink_efficiency: float = Field(
        default=0.690, gt=0, le=1, description="FITTED on DeepEP normal EP8 (153/158 GB/s, dispatch/combine mean): "
                                               "NVLink bytes actually crossing links per second over the datasheet "
                                               "per-direction NVLink bandwidth (H800 200 GB/s)")
    normal_sms: int = Field(default=24, ge=1, description="SMs the normal kernels occupy (DeepEP test_internode.py "
                                                          "num_sms = 24; DeepSeek-V3 report §3.2.2 used 20)")
    normal_rdma_chunk_tokens: int = Field(
        default=16, ge=1, description="tokens per RDMA write of the normal kernels (DeepEP Config default RDMA chunk "
                                      "16; tuned 4-32 in test_internode.py)")
    normal_ibgda_qps: int = Field(default=24, ge=1, description="queue pairs per peer with IBGDA (DeepEP "
                                                                "test_internode.py num_qps_per_rank = num_sms = 24)")
    kernel_latency_s: float = Field(default=10e-6, ge=0, description="ASSUMPTION: launch plus the first chunk's "
                                                                     "round trip of a dispatch or combine kernel")

    # ---- per queue-pair stream throughput (flow-controlled chunks in order on one QP) ----
    qp_throughput_Bps: dict[str, float] = Field(
        default={"cpu_proxy": 43.6e9, "ibgda": 8.71e9},
        description="FITTED: throughput of one QP carrying one peer's in-order, credit-limited chunk stream, in series "
                    "with the NIC (1/R = 1/NIC + 1/(peers x QPs x q)). cpu_proxy on DeepEP normal EP32 (44/47 GB/s, "
                    "IBRC, 1 QP per peer); ibgda on normal_ibgda EP32 (58/57 GB/s, 24 QPs per peer, PR #130). "
                    "A single IBGDA QP is slower than the proxy's, as NVSHMEM issue #8 reports for one CTA")

    # ---- DeepEP low-latency kernels ----
    ll_latency_s: float = Field(
        default=0.0, ge=0, description="FITTED on DeepEP low-latency EP8 dispatch (163 us), floored at 0: fixed "
                                       "part of a low-latency kernel. The fit hits the floor: the shared IBGDA "
                                       "message rate (collectives, 8 KiB saturation) alone gives 169 us")
    ll_per_node_hop_s: float = Field(
        default=3.9e-6, ge=0, description="FITTED on DeepEP low-latency EP256: extra time per doubling of the nodes "
                                       "a rank talks to (fabric congestion and receive-side skew)")

    # ---- NCCL all-to-all (Megatron alltoall token dispatcher) ----
    nccl_host_sync_s: float = Field(
        default=30e-6, ge=0, description="ASSUMPTION: dropless dispatch copies the per-expert counts to the host "
                                         "(Megatron moe_token_dispatcher .cpu()/tolist()) before sizing the "
                                         "all-to-all: one device sync and launch, ~30 us")
    nccl_metadata_bytes: int = Field(default=8, ge=1, description="bytes per expert count exchanged before a "
                                                                  "dropless all-to-all (int64 counts)")

    # ---- CPU-proxy EP (UCCL-EP) ----
    proxy_threads: int = Field(default=4, ge=1, description="ASSUMPTION: CPU proxy threads per GPU of UCCL-EP "
                                                            "(arXiv 2512.19849: multithreaded CPU proxies)")

    # ---- overlap ----
    pipeline_chunks: int = Field(default=4, ge=1, description="ASSUMPTION: a streamed layer splits the batch in 4 "
                                                              "chunks; fill/drain exposes one chunk of comm")


DEFAULT_MOE_COEFFICIENTS = MoeCoefficients()


def format_moe_coefficients(c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS) -> str:
    """One line per entry with its value, then its source."""
    lines = []
    for name, field in MoeCoefficients.model_fields.items():
        lines += [f"{name} = {getattr(c, name)!r}", f"    source: {field.description}"]
    return "\n".join(lines)
