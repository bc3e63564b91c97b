"""Seconds offload adds to a training step: host-link copies against the compute they hide behind, and the CPU
optimizer step (docs/offload.md for the formulas, sources and the hand-checked case).

Rates, per GPU when every GPU of the job's node does the same at once:
- host link ``B_h`` = :func:`simulator.topology.host.host_link_Bps` x ``host_copy_efficiency`` (data/offload.yaml);
- CPU ``B_c`` = the node's ``cpu.memory_bandwidth`` x ``cpu_optimizer_efficiency`` / GPUs of the job on the node: the
  CPU Adam step streams ``2 main + 2 moments + 4 + param`` bytes per parameter (read and write the fp32 master and
  each moment, read the fp32 gradient, write the 16-bit parameter: DeepSpeed's ``DeepSpeedCPUAdam`` step, Megatron's
  CPU Adam on the ``HybridDeviceOptimizer``'s CPU copies), so its time is bytes / ``B_c``; the efficiency (0.12) is
  fitted to DeepSpeed's published ZeRO-Offload cost on a DGX A100 (simulator/validation/data/deepspeed_offload.csv);
- NVMe (ZeRO-Infinity ``offload_param: nvme``): the node's drives' sequential read / write shared by its GPUs.

Copies run on the copy engines, so a hidden copy does not slow the compute (no interference term).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from simulator.caching import memo
from simulator.errors import UserError
from simulator.plan.offload import HOST_GRAD_BYTES, Offload
from simulator.plan.recipe import Recipe
from simulator.topology import Topology
from simulator.topology.host import host_link_Bps
from simulator.yamlio import fast_safe_load


@memo(maxsize=8, loaded=True)
def offload_coefficients() -> dict[str, float]:
    """``host_copy_efficiency`` and ``cpu_optimizer_efficiency`` from ``data/offload.yaml``."""
    text = (resources.files("simulator.pricing") / "data" / "offload.yaml").read_text(encoding="utf-8")
    return {k: float(v["value"]) for k, v in fast_safe_load(text).items()}


@dataclass(frozen=True)
class HostRates:
    """Achievable per-GPU rates of the host side, B/s (module docstring)."""

    link_Bps: float
    cpu_Bps: float | None
    """None: the node profile has no ``cpu.memory_bandwidth`` (only activation offload can be priced)"""
    nvme_read_Bps: float | None = None
    nvme_write_Bps: float | None = None


def host_rates(topology: Topology, world_size: int) -> HostRates:
    """The :class:`HostRates` of a job of ``world_size`` GPUs on ``topology`` (its ranks fill nodes in order)."""
    node = topology.cluster.node
    gpus = min(world_size, node.gpus)
    k = offload_coefficients()
    link = host_link_Bps(topology, gpus) * k["host_copy_efficiency"]
    cpu = None if node.cpu.memory_bandwidth is None else node.cpu.memory_bandwidth * k["cpu_optimizer_efficiency"] / gpus
    if node.nvme is None:
        return HostRates(link, cpu)
    return HostRates(link, cpu, node.nvme.drives * node.nvme.read_bandwidth / gpus,
                     node.nvme.drives * node.nvme.write_bandwidth / gpus)


def cpu_adam_bytes(rb: Recipe) -> float:
    """DRAM bytes the CPU Adam step moves per parameter (module docstring): 2 x 4 + 2 x 8 + 4 + 2 = 30 with fp32
    master and moments and bf16 parameters."""
    return 2 * rb.main + 2 * rb.moments + HOST_GRAD_BYTES + rb.param


def hidden_behind(copy_s: float, window_s: float) -> float:
    """Seconds of a copy of ``copy_s`` that ``window_s`` of compute does not hide."""
    return max(copy_s - window_s, 0.0)


@dataclass(frozen=True)
class OffloadTimes:
    """What offload adds to one stage's step: ``cpu_s`` of CPU optimizer step (in the optimizer's time),
    ``copy_s`` of exposed host-link copies (the breakdown's ``offload``)."""

    cpu_s: float = 0.0
    copy_s: float = 0.0


def optimizer_offload(owned: float, off: Offload, rb: Recipe, rates: HostRates, micro_batches: int,
                      backward_s: float) -> OffloadTimes:
    """The optimizer share ``f`` of ``owned`` parameters on the host (``n = f x owned``):
    gradients down ``n x grad`` B (4 B, fp32, for ZeRO-Offload), the CPU step ``n x`` :func:`cpu_adam_bytes` B, parameters up ``n x param`` B.

    - gradients leaving during backward (ZeRO-Offload, FSDP2: ``off.grads_on_host``): each micro-batch's reduced
      gradients go down under its backward (``backward_s`` per micro-batch; DeepSpeed accumulates them on the
      host), exposing ``m x max(0, d2h - backward_s)``; then the CPU step and the parameter copy, in turn;
    - Megatron's HybridDeviceOptimizer: the three after backward, in turn (sum), or pipelined over parameter
      groups with ``--overlap-cpu-optimizer-d2h-h2d`` (their maximum);
    - with ZeRO-Infinity's parameter offload the new parameters stay where they live (no copy up; NVMe: written
      there, ``owned x param / write``).
    """
    n = owned * off.optimizer_fraction
    if n == 0:
        return OffloadTimes()
    if rates.cpu_Bps is None:
        raise UserError("optimizer_cpu_offload steps the optimizer on the CPU: the node profile needs "
                        "cpu.memory_bandwidth (with memory_source)", key_path="parallel.optimizer_cpu_offload")
    # DeepSpeed casts each gradient to fp32 on the GPU before its copy down (stage_1_and_2.py
    # async_inplace_copy_grad_to_fp32_buffer_from_gpu at edaa7221); Megatron copies its main gradients as they are
    d2h = n * (HOST_GRAD_BYTES if off.grads_on_host else rb.grad) / rates.link_Bps
    cpu = n * cpu_adam_bytes(rb) / rates.cpu_Bps
    h2d = n * rb.param / rates.link_Bps if off.param_device == "none" else 0.0
    if off.param_device == "nvme":
        h2d = owned * rb.param / rates.nvme_write_Bps
    if off.grads_on_host:
        return OffloadTimes(cpu, micro_batches * hidden_behind(d2h, backward_s) + h2d)
    if off.overlap_d2h_h2d:
        return OffloadTimes(cpu, max(d2h, cpu, h2d) - cpu)
    return OffloadTimes(cpu, d2h + h2d)


def param_fetch_s(owned: float, off: Offload, rb: Recipe, rates: HostRates, micro_batches: int,
                  forward_s: float, backward_s: float) -> float:
    """ZeRO-Infinity: the owned parameter shard comes up before each forward and each backward of every
    micro-batch (``owned x param`` B over the host link, or NVMe reads then the link), prefetched under the
    previous pass's compute: ``m x (max(0, fetch - forward_s) + max(0, fetch - backward_s))``."""
    if off.param_device == "none":
        return 0.0
    rate = rates.link_Bps if off.param_device == "cpu" else min(rates.link_Bps, rates.nvme_read_Bps)
    fetch = owned * rb.param / rate
    return micro_batches * (hidden_behind(fetch, forward_s) + hidden_behind(fetch, backward_s))


def activation_offload_s(layer_bytes: float, layers: int, offloaded: int, rates: HostRates, micro_batches: int,
                         forward_s: float, backward_s: float) -> float:
    """Megatron activation offload over Transformer Engine's ``OffloadSynchronizer`` (cpu_offload.py at 00382b96):
    layer i's saved tensors (``layer_bytes``, i = 1..N) go down on the copy stream once its forward ends, one copy
    after another, and must be down before layer L - N + i starts its forward; each comes back one layer ahead in
    backward, under the next layer's backward. With ``c = layer_bytes / B_h`` and a layer's share ``f = forward_s /
    L``, ``b = backward_s / L`` of the micro-batch's chunks, the copy stream stalls the forward by
    ``max(0, max over i of i c - (L - N + i - 2) f)`` (the largest at i = 1 or i = N) and each reload the backward by
    ``max(0, c - b)``; per step ``m x`` (the forward stall + ``N x`` the reload's)."""
    if offloaded == 0:
        return 0.0
    copy, f, b = layer_bytes / rates.link_Bps, forward_s / layers, backward_s / layers
    forward = max(0.0, copy - (layers - offloaded - 1) * f, offloaded * copy - (layers - 2) * f)
    return micro_batches * (forward + offloaded * hidden_behind(copy, b))
