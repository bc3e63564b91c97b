"""Optimizer step time: a streaming (memory-bound) update over the parameters this rank owns.

One fused multi-tensor kernel (Megatron ``FusedAdam`` / PyTorch ``foreach`` Adam) reads and writes, per owned
parameter, the bytes the plan's precision recipe names (``Recipe.optimizer_update_bytes``: gradient, master or
fp32 parameters, the 16-bit copy, every moment, and the gradient-norm read); then the full local gradient buffer
is zeroed for the next step (``Recipe.grad`` bytes per local parameter). The byte counts live with the recipe
(:mod:`simulator.plan.recipe`), so memory, traffic and this time agree on them.
"""

from __future__ import annotations

from simulator.compute.efficiency import ComputeEfficiency
from simulator.hardware import GpuSpec


def optimizer_bytes(owned_params: float, local_params: float, update_bytes: float, grad_bytes: float) -> float:
    """HBM bytes of one optimizer step: ``update_bytes`` per owned parameter (the shard this rank updates) and
    zeroing ``grad_bytes`` per local gradient element."""
    return owned_params * update_bytes + local_params * grad_bytes


def optimizer_time(owned_params: float, local_params: float, update_bytes: float, grad_bytes: float, gpu: GpuSpec,
                   eff: ComputeEfficiency) -> float:
    """Seconds of the optimizer step at the achievable HBM bandwidth (``optimizer_efficiency`` where a table has
    one, else ``memory_efficiency``)."""
    return optimizer_bytes(owned_params, local_params, update_bytes, grad_bytes) / (
        gpu.memory.bandwidth * (eff.optimizer_efficiency or eff.memory_efficiency))
