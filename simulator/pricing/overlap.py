"""Exposed time of communication that may hide behind compute, and the overlap coefficients (data/overlap.yaml).

Rule (every overlap switch): a collective of ``comm_s`` running under ``window_s`` of compute exposes
``max(0, comm_s - window_s)``, and the hidden part still slows the compute by ``interference x hidden`` (NCCL
kernels occupy SMs and HBM bandwidth). Ring steps of CP are matched one-to-one with attention blocks.

Two interference values:
- a collective inside an NVLink domain: ``overlap_interference`` of ``data/overlap.yaml`` (0.67, fit to Korthikanti
  et al. 2023 Table 4's tensor-parallel all-reduce under the weight-gradient GEMM: NVLink rate traffic contends for
  SMs, HBM and L2);
- a collective whose traffic crosses the network (:func:`network_interference`): its kernels hold their channels'
  SMs while they wait on the NICs, and move data at network rate only.
"""

from __future__ import annotations

from importlib import resources

from simulator.caching import memo
from simulator.yamlio import fast_safe_load


@memo(maxsize=64, loaded=True)
def coefficients() -> dict[str, float]:
    """``overlap_interference`` and ``grad_bucket_elements`` from ``data/overlap.yaml``."""
    text = (resources.files("simulator.pricing") / "data" / "overlap.yaml").read_text(encoding="utf-8")
    return {k: float(v["value"]) for k, v in fast_safe_load(text).items()}


def exposed(comm_s: float, window_s: float, interference: float | None = None) -> float:
    """Seconds a collective of ``comm_s`` adds when it overlaps ``window_s`` of compute (module docstring)."""
    if comm_s <= 0:
        return 0.0
    k = coefficients()["overlap_interference"] if interference is None else interference
    hidden = min(comm_s, max(window_s, 0.0))
    return comm_s - hidden + k * hidden


def exposed_bucketed(comm_s: float, window_s: float, last_bucket_fraction: float,
                     interference: float | None = None) -> float:
    """Gradient reduction overlapped with backward in buckets: at least the last bucket is exposed (it can start
    only when backward ends)."""
    if comm_s <= 0:
        return 0.0
    tail = comm_s * min(1.0, last_bucket_fraction)
    return tail + exposed(comm_s - tail, window_s, interference)


def network_interference(channels: int, sms: int) -> float:
    """Interference of a collective whose traffic crosses the network: the share of the GPU's SMs its kernel holds.

    NCCL launches one thread block per channel (``ncclLaunchKernel``: grid = the plan's channel count; NCCL
    src/enqueue.cc, v2.30.7-1), each with up to 640 threads and NCCL's dynamic shared memory, resident for the whole
    collective; a network-bound collective's blocks mostly wait for the proxy and the NIC, and a compute-bound
    GEMM beside them runs on the other ``sms - channels`` SMs, so each hidden second costs the compute
    ``channels / sms`` seconds. The data such a kernel moves at NIC rate (at most 3 passes x 50 GB/s per GPU on a
    DGX H100, under 5% of its 3.35 TB/s HBM) is neglected. Measured on the H200 with resident blocks beside a
    bf16 GEMM (simulator/validation/data/h200_overlap): the loss never exceeds the SM share (0.64-0.78 of it at 32-48
    blocks), and streaming blocks cost no more than waiting ones, so this is the upper end. ``channels``: the ring channels the collective model
    prices the group's network traffic with (``Coefficients.net_channels_per_nic`` x the NICs the group uses;
    on a DGX H100 16 / 132 SMs = 0.12 with eight GPUs of the group per node, 2 / 132 with one)."""
    return min(1.0, channels / sms)
