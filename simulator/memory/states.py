"""Model-state bytes per parameter for each precision recipe, and which states a sharding strategy splits.

Source: reference sharding_and_comm.md (the spec; corrects the seed notes), Korthikanti et al. 2023 / Megatron-LM
(18 B/param: 16-bit params, fp32 main grads, fp32 main params, two fp32 Adam moments; distributed optimizer
6 + 12/d), Rajbhandari et al. 2020 "ZeRO" Sec. 3 (16 B/param: fp16 params and grads, fp32 params + moments = 12).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.params import sharding_stage

FP32, BF16, FP8 = 4, 2, 1
"""Bytes per element of the dtypes model states are kept in."""
_MOMENTS = {"adam": 2, "sgd": 1, "adafactor": 0}
"""Optimizer states per parameter: Adam m and v; SGD momentum; Adafactor's factored second moment is O(rows+cols)
and its first moment is off by default, so ~0 per parameter."""


@dataclass(frozen=True, slots=True)
class RecipeBytes:
    """Unsharded bytes per parameter of each state, the sharding stage (0-3) and the convention's name."""

    param: float
    grad: float
    main: float
    moments: float
    bucket: float
    stage: int
    convention: str

    def per_param(self, d: int) -> float:
        """Bytes per parameter on one GPU when states are sharded over ``d`` ranks at ``self.stage`` (DDP gradient
        buckets only exist with more than one replica)."""
        return (self.param / (d if self.stage >= 3 else 1) + self.grad / (d if self.stage >= 2 else 1)
                + (self.main + self.moments) / (d if self.stage >= 1 else 1) + (self.bucket if d > 1 else 0.0))


def recipe_bytes(plan: ParallelPlan, training: TrainingConfig) -> RecipeBytes:
    """Bytes per parameter of each model state for the plan's precision recipe and framework.

    - ``bf16``/``fp16`` with Megatron sharding (zero 0): 2 + 4 (fp32 main grads) + 4 + 8 = 18.
    - ``bf16``/``fp16`` with DeepSpeed ZeRO (zero > 0) or plain PyTorch: ZeRO convention 2 + 2 + 4 + 8 = 16.
    - ``fp8``: fp8 primary weights (Megatron ``--fp8-param-gather``) in place of the 16-bit params: 1 + 4 + 4 + 8.
    - ``amp_bf16``/``fp32``: fp32 params and grads, no main copy: 4 + 4 + 8 = 16; PyTorch DDP (zero 0) adds
      gradient buckets of the gradient size (4): 20.
    - ``pure_bf16``: params, grads and moments all bf16: 2 + 2 + 4 = 8.
    """
    moments = _MOMENTS[training.optimizer]
    stage = sharding_stage(plan)
    megatron = training.framework == "megatron" and plan.zero == 0
    p = training.precision
    if p in ("bf16", "fp16", "fp8"):
        param = FP8 if p == "fp8" else BF16
        grad = FP32 if megatron else BF16
        conv = "Megatron mixed precision" if megatron else "ZeRO mixed precision"
        return RecipeBytes(param, grad, FP32, moments * FP32, 0.0, stage, conv)
    if p == "pure_bf16":
        return RecipeBytes(BF16, BF16, 0.0, moments * BF16, 0.0, stage, "pure bf16")
    bucket = FP32 if training.framework == "pytorch" and stage == 0 else 0.0
    name = "PyTorch AMP (fp32 params)" if p == "amp_bf16" else "fp32"
    return RecipeBytes(FP32, FP32, 0.0, moments * FP32, bucket, stage, name)


def compute_dtype_bytes(training: TrainingConfig) -> int:
    """Bytes of a weight as the GEMMs read it (gathered ZeRO-3/FSDP layers are in this dtype)."""
    return {"fp32": FP32, "fp8": FP8}.get(training.precision, BF16)


def activation_dtype_bytes(training: TrainingConfig) -> int:
    """Bytes per activation element: 4 for the fp32 recipe, else 2 (bf16/fp16 autocast; fp8 GEMM inputs are
    counted at 16 bits)."""
    return FP32 if training.precision == "fp32" else BF16
