"""Model architecture specs: dense GPT, Llama-style, MoE and MLA, as strict frozen pydantic models.

A :class:`ModelSpec` describes one decoder-only transformer. Derived sizes (head dim, K/V width, FFN width per
layer) are read-only properties so every later package reads them the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.caching import memo
from simulator.errors import UserError
from simulator.model.quantization import WeightQuantization

_STRICT = ConfigDict(extra="forbid", frozen=True)


class MoESpec(BaseModel):
    """Mixture-of-experts feed-forward (Switch/GShard routing; Mixtral, DeepSeek-V3, gpt-oss)."""

    model_config = _STRICT

    experts: int = Field(ge=1, description="routed experts per MoE layer")
    top_k: int = Field(ge=1, description="routed experts each token goes to")
    expert_ffn_hidden: int = Field(ge=1, description="FFN width of one routed expert")
    shared_experts: int = Field(0, ge=0, description="always-active shared experts (DeepSeek)")
    shared_expert_ffn_hidden: int | None = Field(
        None, ge=1, description="total FFN width of the shared experts; default shared_experts * expert_ffn_hidden")
    first_dense_layers: int = Field(0, ge=0, description="the first k layers use a dense FFN (DeepSeek first_k_dense_replace)")
    layer_freq: int = Field(1, ge=1, description="every layer_freq-th layer (after the dense ones) is MoE")
    capacity_factor: float | None = Field(None, gt=0, description="token capacity per expert; null = dropless")
    router_bias: bool = Field(False, description="router has a per-expert bias (gpt-oss) or score-correction bias")

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise UserError(f"moe.top_k ({self.top_k}) exceeds moe.experts ({self.experts})", key_path="model.moe.top_k")
        return self

    @property
    def shared_ffn(self) -> int:
        """Total FFN width of the shared experts (0 when there are none)."""
        if self.shared_experts == 0:
            return 0
        return self.shared_expert_ffn_hidden or self.shared_experts * self.expert_ffn_hidden


class MLASpec(BaseModel):
    """DeepSeek multi-head latent attention (DeepSeek-V2/V3): low-rank Q and joint K/V compression.

    Parameters are counted exactly. For activations and FLOPs the core attention is treated as MHA with
    ``qk_nope_head_dim + qk_rope_head_dim`` wide Q/K heads and ``v_head_dim`` wide V heads (the latent K/V are
    decompressed before attention, as in the training kernels); see docs/memory.md.
    """

    model_config = _STRICT

    q_lora_rank: int | None = Field(None, ge=1, description="Q compression rank; null = direct Q projection")
    kv_lora_rank: int = Field(ge=1, description="joint K/V compression rank")
    qk_nope_head_dim: int = Field(ge=1, description="per-head Q/K width without rotary embedding")
    qk_rope_head_dim: int = Field(ge=0, description="per-head Q/K width with rotary embedding (K part shared)")
    v_head_dim: int = Field(ge=1, description="per-head V width")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class ModelSpec(BaseModel):
    """A decoder-only transformer (GPT: layernorm, gelu 4h MLP, biases; Llama: rmsnorm, swiglu, GQA, RoPE)."""

    model_config = _STRICT

    name: str = Field("custom", description="preset name or a label")
    layers: int = Field(ge=1, description="transformer layers")
    hidden: int = Field(ge=1, description="model width h")
    heads: int = Field(ge=1, description="attention (query) heads a")
    kv_heads: int | None = Field(None, ge=1, description="K/V heads (GQA); null = heads (MHA)")
    head_dim: int | None = Field(None, ge=1, description="per-head width; null = hidden / heads")
    ffn_hidden: int | None = Field(None, ge=1, description="dense FFN width; null = 4 * hidden (gelu only)")
    vocab: int = Field(ge=2, description="vocabulary size v; at least 2: over one token the softmax is 1 whatever the "
                       "logits, so the loss and its gradient are 0 and nothing is learned (the smallest real "
                       "vocabularies are byte or character sets: 256, nanoGPT's shakespeare_char 65)")
    activation: Literal["gelu", "swiglu"] = Field("gelu", description="MLP activation; swiglu has gate and up")
    norm: Literal["layernorm", "rmsnorm"] = Field("layernorm", description="normalization (layernorm has a bias)")
    tied_embeddings: bool = Field(False, description="output layer shares the input embedding matrix")
    linear_bias: bool = Field(False, description="all linear layers have biases (GPT-2/3)")
    qkv_bias: bool | None = Field(None, description="Q/K/V projections have biases; null = linear_bias (Qwen2: true)")
    qk_norm: bool = Field(False, description="per-head RMSNorm of Q and K (Qwen3)")
    position_embedding: Literal["learned", "rope", "none", "alibi"] = Field(
        "rope", description="learned absolute, rotary, none, or ALiBi (a per-head linear bias added to the scores)")
    max_position: int = Field(2048, ge=1, description="rows of a learned position embedding")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="hidden and attention dropout probability")
    moe: MoESpec | None = Field(None, description="mixture-of-experts FFN; null = dense")
    mla: MLASpec | None = Field(None, description="multi-head latent attention; null = standard MHA/GQA")
    sliding_window: int | None = Field(None, ge=1, description="causal sliding-window attention: each query "
                                                                "attends the last sliding_window tokens (Mistral, "
                                                                "gpt-oss, Gemma); null = full attention")
    sliding_window_pattern: int = Field(1, ge=1, description="with sliding_window: of every n layers the last one "
                                                             "keeps full attention (gpt-oss 2: alternating, Gemma-3 6); "
                                                             "1 = every layer is windowed")
    mtp_layers: int = Field(0, ge=0, description="multi-token-prediction modules trained after the last layer "
                                                 "(DeepSeek-V3: 1; HF num_nextn_predict_layers, Megatron "
                                                 "--mtp-num-layers); each is one more layer of the model's last kind "
                                                 "plus a 2h->h projection, two norms and its own pass through the "
                                                 "shared output layer and loss")
    weight_quantization: WeightQuantization | None = Field(
        None, description="serving: the checkpoint's weight format and the modules it covers (simulator/model/"
                          "quantization.py; gpt-oss: {format: mxfp4, modules: experts}); null: every weight at "
                          "training.precision's serving bytes")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.head_dim is None and self.hidden % self.heads:
            raise UserError(f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); give head_dim",
                            key_path="model.heads")
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise UserError(f"heads ({self.heads}) is not divisible by kv_heads ({kv})", key_path="model.kv_heads")
        if self.activation == "swiglu" and self.ffn_hidden is None and self.moe is None:
            raise UserError("activation swiglu needs ffn_hidden (its width is not 4 * hidden)",
                            key_path="model.ffn_hidden")
        if self.sliding_window_pattern != 1 and self.sliding_window is None:
            raise UserError(f"sliding_window_pattern ({self.sliding_window_pattern}) needs sliding_window (the window "
                            "in tokens); without it every layer has full attention",
                            key_path="model.sliding_window_pattern")
        if self.moe is not None and self.moe.first_dense_layers > self.layers:
            raise UserError(f"moe.first_dense_layers ({self.moe.first_dense_layers}) exceeds layers ({self.layers})",
                            key_path="model.moe.first_dense_layers")
        return self

    # ---- derived sizes -------------------------------------------------------------------------------------
    @property
    def kv(self) -> int:
        """K/V heads (equals ``heads`` for MHA)."""
        return self.kv_heads or self.heads

    @property
    def dhead(self) -> int:
        """Per-head width of Q and K (MLA: nope + rope part)."""
        if self.mla is not None:
            return self.mla.qk_head_dim
        return self.head_dim or self.hidden // self.heads

    @property
    def dhead_v(self) -> int:
        """Per-head width of V and of the attention output."""
        if self.mla is not None:
            return self.mla.v_head_dim
        return self.head_dim or self.hidden // self.heads

    @property
    def ffn(self) -> int:
        """Dense FFN width (4h by default for gelu)."""
        return self.ffn_hidden or 4 * self.hidden

    @property
    def glu(self) -> bool:
        """Gated MLP (two input projections: gate and up)."""
        return self.activation == "swiglu"

    @property
    def has_qkv_bias(self) -> bool:
        return self.linear_bias if self.qkv_bias is None else self.qkv_bias

    def attention_window(self, index: int) -> int | None:
        """The sliding window of layer ``index`` (None = full causal attention)."""
        if self.sliding_window is None:
            return None
        p = self.sliding_window_pattern
        return self.sliding_window if p == 1 or index % p != p - 1 else None

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has a routed-expert FFN; indices from ``layers`` on are the MTP
        modules' layers, of the last layer's kind."""
        index = min(index, self.layers - 1)
        if self.moe is None or index < self.moe.first_dense_layers:
            return False
        return (index - self.moe.first_dense_layers) % self.moe.layer_freq == 0

    @property
    def moe_layers(self) -> int:
        """How many layers are MoE layers."""
        if self.moe is None:
            return 0
        return sum(self.is_moe_layer(i) for i in range(self.layers))


@memo(maxsize=64)
def moe_layer_flags(model: ModelSpec) -> tuple[bool, ...]:
    """:meth:`ModelSpec.is_moe_layer` of every layer index 0..layers-1, computed once per model (a frozen model
    hashes by value); hot loops over a stage's layers index this instead of calling the method per layer."""
    return tuple(model.is_moe_layer(i) for i in range(model.layers))


def moe_flags_of(model: ModelSpec, indices) -> list[bool]:
    """:meth:`ModelSpec.is_moe_layer` of each of ``indices`` (MTP indices from ``layers`` on take the last layer's
    kind, as the method says)."""
    if model.moe is None:
        return [False] * len(indices)
    flags, last = moe_layer_flags(model), model.layers - 1
    return [flags[i if i < last else last] for i in indices]
