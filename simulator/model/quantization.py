"""A checkpoint's per-tensor-class weight format (``model.weight_quantization``): which weights a quantized
checkpoint stores in a block-scaled low-precision format and which it keeps in 16 bits.

Bytes per weight, element plus its share of the block scale (SI bytes):

- ``mxfp4``: OCP Microscaling FP4, E2M1 values with one E8M0 (8-bit) scale per 32: 0.5 + 1/32 = 0.53125 B
  (OCP MX Formats Specification v1.0, Table 1; openai/gpt-oss-120b config.json ``quantization_config``
  ``quant_method: mxfp4``);
- ``nvfp4``: E2M1 values with one E4M3 (8-bit) scale per 16: 0.5 + 1/16 = 0.5625 B (the fp4 recipe's bytes);
- ``fp8``: one byte, one fp32 scale per tensor (negligible);
- ``fp8_block``: one byte and one fp32 scale per 128 x 128 block: 1 + 4 / 16384 B (DeepSeek-V3 technical report,
  Sec. 3.3.2; its config.json ``weight_block_size [128, 128]``).

``modules``: ``all`` (every linear weight, the embedding and the output layer at the format: what a scenario's
``training.precision`` alone has always meant) or ``experts`` (only the routed and shared experts' weights; attention,
router, norms, embedding and output layer stay bf16, 2 B: gpt-oss's checkpoint, whose ``modules_to_not_convert``
lists ``model.layers.*.self_attn``, ``model.layers.*.mlp.router``, ``model.embed_tokens`` and ``lm_head``;
huggingface.co/openai/gpt-oss-120b config.json, and vLLM's ``vllm/model_executor/layers/quantization/mxfp4.py``
which applies its MoE method to ``FusedMoE`` layers only and leaves linear layers unquantized).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: bytes per weight of each checkpoint format, scales included (module docstring)
FORMAT_BYTES = {"mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16, "fp8": 1.0, "fp8_block": 1.0 + 4 / (128 * 128)}
#: bytes per weight of the tensors a partly quantized checkpoint keeps unquantized (bf16)
UNQUANTIZED_BYTES = 2.0


class WeightQuantization(BaseModel):
    """``model.weight_quantization``: the checkpoint's weight format and the modules it covers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["mxfp4", "nvfp4", "fp8", "fp8_block"] = Field(
        description="block-scaled format of the quantized weights: mxfp4 (0.53125 B), nvfp4 (0.5625 B), fp8 (1 B), "
                    "fp8_block (1 B + an fp32 scale per 128x128)")
    modules: Literal["experts", "all"] = Field(
        "all", description="experts: only the experts' weights at the format, the rest bf16 (gpt-oss); all: every "
                           "weight at the format")

    @property
    def expert_bytes(self) -> float:
        """Bytes per expert weight."""
        return FORMAT_BYTES[self.format]

    @property
    def dense_bytes(self) -> float:
        """Bytes per weight outside the experts (attention, router, norms, embedding, output layer)."""
        return FORMAT_BYTES[self.format] if self.modules == "all" else UNQUANTIZED_BYTES
