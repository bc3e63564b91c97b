"""Optimizer step time: a streaming (memory-bound) update over the parameters this rank owns.

Bytes per owned parameter (read + write, one fused multi-tensor kernel; Megatron ``FusedAdam`` / PyTorch
``foreach`` Adam) by precision recipe and optimizer, plus a gradient-norm pass (read the gradients once) and
zeroing the full local gradient buffer for the next step. Adam keeps two moments (read+write 16 bytes in fp32);
SGD none; Adafactor factored second moments (counted as 0).
"""

from __future__ import annotations

from simulator.compute.efficiency import ComputeEfficiency
from simulator.hardware import GpuSpec

#: bytes of (gradient read, master/param read+write, 16-bit copy write) per owned parameter, and gradient bytes
_RECIPE = {
    # recipe: (grad read, master param read+write, model param write, gradient element bytes)
    "bf16": (4, 8, 2, 4), "fp16": (4, 8, 2, 4), "fp8": (4, 8, 2, 4),
    "amp_bf16": (4, 8, 0, 4), "fp32": (4, 8, 0, 4), "pure_bf16": (2, 4, 0, 2),
}
_MOMENTS = {"adam": 2, "sgd": 0, "adafactor": 0}


def optimizer_bytes(owned_params: float, local_params: float, precision: str, optimizer: str) -> float:
    """HBM bytes of one optimizer step: update of ``owned_params`` (the shard this rank updates), gradient-norm
    read of them, and zeroing of ``local_params`` gradient elements."""
    grad, master, param, grad_elem = _RECIPE[precision]
    moment_bytes = 4 if precision != "pure_bf16" else 2
    update = grad + master + param + 2 * moment_bytes * _MOMENTS[optimizer]
    return owned_params * (update + grad) + local_params * grad_elem


def optimizer_time(owned_params: float, local_params: float, precision: str, optimizer: str, gpu: GpuSpec,
                   eff: ComputeEfficiency) -> float:
    """Seconds of the optimizer step at the achievable HBM bandwidth."""
    return optimizer_bytes(owned_params, local_params, precision, optimizer) / (
        gpu.memory.bandwidth * eff.memory_efficiency)
