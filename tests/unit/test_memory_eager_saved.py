"""What eager PyTorch layers keep for backward, against a tensor-by-tensor count (issue 28 item 3, H200 peaks).

The expected numbers are benchmarks/saved_tensors_count.py's (torch.autograd.graph.saved_tensors_hooks on CPU,
torch 2.14, transformers 5.25; distinct storages, parameters and their autocast copies left out) for T = 16 x 128
tokens, h = 256, 4 heads, in units of T*h bytes, less the rotary cos / sin that harness feeds each layer (a model
computes them once for all layers):
- Hugging Face Qwen2 layer (SwiGLU 512, no GQA at 4 / 4 heads), bf16: 41.094 - 1.000 (bf16 cos, sin) = 40.094;
- the same under autocast with fp32 parameters and residual stream: 52.094 - 2.000 (fp32 cos, sin) = 50.094;
- benchmarks/device/memory_features.py's GPT block (LayerNorm, fused qkv, GeLU 1024) under autocast: 36.125;
- OLMoE MoE block (8 experts, top-2, expert FFN 96), eager per-expert loop 20.312 against grouped_mm 16.391: the
  loop keeps one more [T k, h] bf16 tensor (index_add_ keeps its source), 2 T k h = 4 T*h (+0.08 of int64 indices).
Fractions: 0.0625 = the fp32 SDPA logsumexp 4 T a, 0.031 = two fp32 RMSNorm rstd 2 x 4 T; a LayerNorm keeps mean and
rstd (2 x 2 x 4 T = 0.0625).
"""

import pytest

from simulator.memory import layer_activation_items
from simulator.memory.estimate import activation_context
from simulator.model import ModelSpec
from simulator.plan import resolve_plan

T, H, A = 16 * 128, 256, 4
TH = T * H
QWEN = ModelSpec(layers=1, hidden=H, heads=A, kv_heads=A, ffn_hidden=2 * H, vocab=512, activation="swiglu",
                 norm="rmsnorm", qkv_bias=True, tied_embeddings=True)
GPT = ModelSpec(layers=1, hidden=H, heads=A, ffn_hidden=4 * H, vocab=512, activation="gelu", norm="layernorm",
                position_embedding="learned", max_position=128, tied_embeddings=False)
OLMOE = ModelSpec(layers=1, hidden=H, heads=A, ffn_hidden=96, vocab=512, activation="swiglu", norm="rmsnorm",
                  tied_embeddings=False, qk_norm=True, moe=dict(experts=8, top_k=2, expert_ffn_hidden=96))


def _layer(model, framework, precision, moe_layer=False):
    training = {"seq_len": 128, "micro_batch": 16, "global_batch": 16, "framework": framework,
                "precision": precision}
    rp = resolve_plan(model, {}, training, 1)
    return dict((n, b) for n, b, _ in layer_activation_items(model, activation_context(rp), moe_layer=moe_layer))


def test_hf_layer_bf16():
    items = _layer(QWEN, "hf_transformers", "pure_bf16")
    assert items["attn.norm_in"] == 4 * TH and items["attn.norm_normed"] == 2 * TH   # fp32 upcast, pre-weight
    assert "attn.proj_in" not in items                                                # SDPA output, one storage
    assert sum(items.values()) == 40 * TH + 4 * T * A + 2 * 4 * T == pytest.approx(40.094 * TH, rel=1e-4)


def test_hf_layer_under_autocast():
    """fp32 residual: each norm keeps its fp32 input and fp32 normalized tensor; q, k, v and gate, up each keep
    autocast's own bf16 copy of the norm output (3 + 2 copies)."""
    items = _layer(QWEN, "hf_trainer", "amp_bf16")
    assert items["attn.norm_in"] == items["attn.norm_normed"] == 4 * TH
    assert items["attn.qkv_in"] == 3 * 2 * TH and items["mlp.fc1_in"] == 2 * 2 * TH
    assert sum(items.values()) == 50 * TH + 4 * T * A + 2 * 4 * T == pytest.approx(50.094 * TH, rel=1e-4)


def test_plain_gpt_block_under_autocast():
    items = _layer(GPT, "pytorch", "amp_bf16")
    assert items["attn.norm_in"] == items["mlp.norm_in"] == 4 * TH                    # the fp32 residual stream
    assert sum(items.values()) == 36 * TH + 4 * T * A + 2 * 8 * T == pytest.approx(36.125 * TH, rel=1e-4)


def test_per_expert_loop_keeps_index_add_source():
    loop = _layer(OLMOE, "hf_per_expert_loop", "pure_bf16", moe_layer=True)
    grouped = _layer(OLMOE, "hf_transformers", "pure_bf16", moe_layer=True)
    assert sum(loop.values()) - sum(grouped.values()) == loop["moe.experts.index_add_src"] == 2 * T * 2 * H
    assert (20.312 - 16.391) * TH == pytest.approx(loop["moe.experts.index_add_src"], rel=0.03)
