"""Result types of the memory model: one explained item, one pipeline stage, the whole report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Bucket = Literal["weights", "gradients", "main_params", "optimizer", "activations", "other", "transient"]
Scaling = Literal["fixed", "micro_batch", "in_flight"]
"""How an item's bytes grow with the micro-batch size b of a training plan, all else equal: ``fixed`` (model
states, buffers sized by parameters), ``micro_batch`` (proportional to b: one micro-batch's tensors), ``in_flight``
(proportional to b times the micro-batches in flight). Plan search evaluates the peak of plans that differ only in
b from one report by it (:mod:`simulator.memory.scaling`); None (not declared) keeps an item out of that."""
BUCKETS: tuple[str, ...] = ("weights", "gradients", "main_params", "optimizer", "activations", "other")
"""docs/interface.md ``memory.stages`` keys (``total`` is their sum); ``transient`` items only raise the peak."""


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One number of the breakdown: ``bytes`` in ``bucket``, with the formula that produced it."""

    bucket: Bucket
    name: str
    bytes: float
    formula: str
    scaling: Scaling | None = None


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Bytes per GPU of one pipeline stage, by docs/interface.md bucket, with the items they sum."""

    stage: int
    items: tuple[MemoryItem, ...]
    moe_worst_case_activations: float | None = None
    gradients_freed: bool = False
    """True when gradient tensors do not persist across steps (PyTorch ``zero_grad(set_to_none=True)``) and the
    step has one micro-batch: they are allocated during backward while the activations are being freed, so both
    never peak together. With gradient accumulation the first micro-batch's gradients live while the next one
    builds its activations (measured on H200: a 3.6B GPT peaks 13 GiB higher with two micro-batches)."""
    nccl_bytes: float = 0.0
    """Device memory the communication libraries hold on a GPU of this stage: NCCL's communicators
    (:mod:`simulator.memory.nccl`) and, with ``moe.backend`` DeepEP, DeepEP's buffers (:mod:`simulator.memory.deepep`):
    outside the tensors (not in ``total`` or ``peak``), in the device peak."""

    phases: tuple[tuple[str, float], ...] = ()
    """With gradients created layer by layer in backward (``training.gradient_lifetime: per_layer``): the live
    bytes at each phase of backward that can hold the peak (:func:`simulator.memory.lifetimes.backward_phases`);
    the peak is the largest. Empty otherwise."""

    def bucket(self, name: str) -> float:
        return sum(i.bytes for i in self.items if i.bucket == name)

    @property
    def total(self) -> float:
        """weights + gradients + main_params + optimizer + activations + other (steady state)."""
        return sum(i.bytes for i in self.items if i.bucket != "transient")

    @property
    def peak(self) -> float:
        """Largest live memory of the step: steady parts plus transient buffers (assumed live together).

        With ``gradients_freed``, backward frees activations as it allocates gradients, so the peak holds the larger
        of the two (activations at the start of backward, all gradients at its end), not their sum; with
        ``phases`` (gradients created layer by layer) it is the largest phase.
        """
        if self.phases:
            return max(b for _, b in self.phases)
        everything = sum(i.bytes for i in self.items)
        if not self.gradients_freed:
            return everything
        return everything - min(self.bucket("activations"), self.bucket("gradients"))

    def to_dict(self) -> dict[str, float | int]:
        """docs/interface.md stage object: stage, weights, gradients, main_params, optimizer, activations, other, total;
        plus ``peak`` (total and the transient buffers)."""
        out: dict[str, float | int] = {"stage": self.stage}
        for b in BUCKETS:
            out[b] = self.bucket(b)
        out["total"] = self.total
        out["peak"] = self.peak
        return out


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Per-GPU memory of every pipeline stage; OOM flag against ``hbm_capacity_bytes`` when given."""

    stages: tuple[StageMemory, ...]
    hbm_capacity_bytes: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def peak_bytes(self) -> float:
        """Largest stage peak (steady parts plus transient buffers)."""
        return max(s.peak for s in self.stages)

    runtime_bytes: float = 0.0
    """Device memory outside the accounted tensors: CUDA context and libraries plus the allocator's cache
    (:mod:`simulator.memory.runtime`)."""

    @property
    def nccl_bytes(self) -> float:
        """The communication libraries' device memory (NCCL, DeepEP) on the GPU that holds the most of it (largest
        over the stages)."""
        return max(s.nccl_bytes for s in self.stages)

    @property
    def device_peak_bytes(self) -> float:
        """What the device holds at the peak (``nvidia-smi``): the largest over stages of the tensors' peak plus
        NCCL's buffers, plus ``runtime_bytes``."""
        return max(s.peak + s.nccl_bytes for s in self.stages) + self.runtime_bytes

    @property
    def margin_bytes(self) -> float | None:
        """HBM capacity minus the device peak (negative = out of memory); None without a capacity."""
        return None if self.hbm_capacity_bytes is None else self.hbm_capacity_bytes - self.device_peak_bytes

    @property
    def oom(self) -> bool:
        """True when the peak exceeds the HBM capacity."""
        margin = self.margin_bytes
        return margin is not None and margin < 0

    def to_dict(self) -> dict[str, object]:
        """docs/interface.md ``memory`` object: ``peak_bytes`` and ``stages``."""
        return {"peak_bytes": self.peak_bytes, "device_peak_bytes": self.device_peak_bytes,
                "runtime_bytes": self.runtime_bytes, "nccl_bytes": self.nccl_bytes,
                "stages": [s.to_dict() for s in self.stages]}
