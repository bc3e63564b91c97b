"""Bytes of one token on the wire: FP8 with scale factors or BF16."""

from __future__ import annotations

from math import ceil
from typing import Literal

from simulator.errors import UserError
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS, MoeCoefficients

Dtype = Literal["fp8", "bf16"]
_BF16_BYTES = 2


def token_bytes(hidden: int, dtype: str, c: MoeCoefficients = DEFAULT_MOE_COEFFICIENTS, header_bytes: int = 0) -> int:
    """FP8: ``hidden`` bytes plus one fp32 scale per 128 channels (7168 -> 7392 B); BF16: 2 bytes per channel
    (7168 -> 14336 B). ``header_bytes`` per message (DeepEP low-latency source info) is added."""
    if hidden < 1:
        raise UserError(f"hidden must be >= 1, got {hidden}", key_path="hidden")
    if dtype == "fp8":
        return hidden + ceil(hidden / c.fp8_scale_block) * c.fp8_scale_bytes + header_bytes
    if dtype == "bf16":
        return _BF16_BYTES * hidden + header_bytes
    raise UserError(f"unknown dispatch dtype {dtype!r}; accepted: fp8, bf16", key_path="dispatch_dtype")
