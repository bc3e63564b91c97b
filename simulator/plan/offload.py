"""Offload as a plan knob, resolved once: which model states live in host memory (or on NVMe) and what moves over the
host link each step (docs/offload.md). Memory (:mod:`simulator.memory.estimate`, :mod:`simulator.memory.offload`)
and the step's tail (:mod:`simulator.pricing.offload`) read :func:`offload_of`, never the raw keys.

The frameworks modelled (sources in docs/offload.md):
- optimizer states and the fp32 master weights on the host, the optimizer step on the CPU: DeepSpeed ZeRO-Offload
  (``zero_optimization.offload_optimizer.device: cpu``, Ren et al. 2021, USENIX ATC), Megatron-Core
  ``--optimizer-cpu-offload`` with ``--optimizer-offload-fraction`` (megatron/core/optimizer/cpu_offloading/
  hybrid_optimizer.py) and PyTorch FSDP2 ``CPUOffloadPolicy``. Megatron's ``HybridDeviceOptimizer`` keeps the DDP
  gradient buffer on the GPU and copies the owned gradients to the host at the optimizer step; ZeRO-Offload and
  FSDP2 stream each reduced gradient partition to the host during backward and keep none on the GPU (the
  ``pytorch`` accounting family);
- parameters on the host or NVMe, fetched before each use: ZeRO-Infinity (``offload_param.device: cpu | nvme``,
  ZeRO stage 3 only; Rajbhandari et al. 2021, SC'21);
- activations: Megatron ``--cpu-offloading-num-layers`` (Transformer Engine ``cpu_offload.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.errors import UserError
from simulator.plan.config import ParallelPlan, TrainingConfig

ParamDevice = Literal["none", "cpu", "nvme"]

#: bytes per offloaded parameter of the fp32 gradient the CPU optimizer reads (DeepSpeed stage_1_and_2.py
#: single_partition_of_fp32_groups[i].grad; Megatron hybrid_optimizer.py's fp32 CPU gradient copies)
HOST_GRAD_BYTES = 4.0


@dataclass(frozen=True)
class Offload:
    """What a plan keeps off the GPU.

    Attributes:
        optimizer_fraction: share of the owned fp32 master weights and optimizer moments on the host, updated by the
            CPU optimizer (0: none).
        grads_on_host: the offloaded share's gradients leave the GPU during backward (ZeRO-Offload, FSDP2) rather
            than being copied from the kept gradient buffer at the step (Megatron).
        overlap_d2h_h2d: gradient copy, CPU step and parameter copy pipelined by parameter group (Megatron
            ``--overlap-cpu-optimizer-d2h-h2d``); otherwise they run one after the other.
        param_device: where the owned 16-bit parameter shard lives between uses (ZeRO-Infinity).
        activation_layers: layers whose saved activations go to the host (Megatron activation CPU offload).
    """

    optimizer_fraction: float = 0.0
    grads_on_host: bool = False
    overlap_d2h_h2d: bool = False
    param_device: ParamDevice = "none"
    activation_layers: int = 0

    @property
    def any(self) -> bool:
        return bool(self.optimizer_fraction or self.param_device != "none" or self.activation_layers)

    def gpu_keep(self) -> tuple[float, float, float, float]:
        """Share kept on the GPU of (weights, gradients, main_params, optimizer) of the owned parameters."""
        f = self.optimizer_fraction
        return (0.0 if self.param_device != "none" else 1.0, 1.0 - f if self.grads_on_host else 1.0, 1.0 - f, 1.0 - f)


NO_OFFLOAD = Offload()


def offload_of(p: ParallelPlan, t: TrainingConfig) -> Offload:
    """The plan's :class:`Offload` (rules in :func:`check_offload`)."""
    if not (p.optimizer_cpu_offload or p.offload_param != "none" or p.cpu_offloading_num_layers):
        return NO_OFFLOAD
    return Offload(optimizer_fraction=p.optimizer_offload_fraction if p.optimizer_cpu_offload else 0.0,
                   grads_on_host=t.family == "pytorch", overlap_d2h_h2d=p.overlap_cpu_optimizer_d2h_h2d,
                   param_device=p.offload_param, activation_layers=p.cpu_offloading_num_layers)


def check_offload(p: ParallelPlan, t: TrainingConfig) -> None:
    """Preconditions of the offload keys, as the frameworks check them: Megatron's --optimizer-cpu-offload needs the
    distributed optimizer (megatron/training/arguments.py: --use-precision-aware-optimizer, which needs
    --use-distributed-optimizer); DeepSpeed's offload_optimizer needs a ZeRO stage (1-3) and offload_param stage 3
    (DeepSpeed docs, ZeRO configuration); the CPU step priced is Adam's (DeepSpeedCPUAdam, Megatron's CPU Adam)."""
    key = "parallel.optimizer_cpu_offload"
    if p.optimizer_offload_fraction != 1.0 and not p.optimizer_cpu_offload:
        raise UserError(f"optimizer_offload_fraction ({p.optimizer_offload_fraction}) only applies with "
                        "optimizer_cpu_offload true", key_path="parallel.optimizer_offload_fraction")
    if p.overlap_cpu_optimizer_d2h_h2d and not (p.optimizer_cpu_offload and t.family == "megatron"):
        raise UserError("overlap_cpu_optimizer_d2h_h2d is Megatron's --overlap-cpu-optimizer-d2h-h2d: it needs "
                        f"optimizer_cpu_offload true and framework megatron (got {p.optimizer_cpu_offload}, "
                        f"{t.framework})", key_path="parallel.overlap_cpu_optimizer_d2h_h2d")
    if p.offload_param != "none":
        if p.zero != 3 or not p.optimizer_cpu_offload:
            raise UserError(f"offload_param {p.offload_param} is ZeRO-Infinity's parameter offload: it needs zero 3 "
                            f"and optimizer_cpu_offload true (got zero {p.zero}, optimizer_cpu_offload "
                            f"{p.optimizer_cpu_offload})", key_path="parallel.offload_param")
    if not p.optimizer_cpu_offload:
        return
    if t.optimizer != "adam":
        raise UserError(f"optimizer_cpu_offload runs the optimizer step on the CPU, priced as CPU Adam: it needs "
                        f"optimizer adam (got {t.optimizer})", key_path=key)
    if t.family == "megatron" and not p.distributed_optimizer:
        raise UserError("optimizer_cpu_offload with framework megatron is --optimizer-cpu-offload, which needs "
                        "distributed_optimizer true (--use-precision-aware-optimizer needs "
                        "--use-distributed-optimizer)", key_path=key)
    if t.family == "pytorch" and p.zero == 0:
        raise UserError("optimizer_cpu_offload with framework pytorch is DeepSpeed ZeRO-Offload / FSDP2 "
                        "CPUOffloadPolicy: it needs zero 1, 2 or 3 (got zero 0)", key_path=key)
