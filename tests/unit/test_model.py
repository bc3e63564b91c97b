"""Model specs: preset parameter counts (published figures), HF config import, FLOP formulas."""

import json

import pytest

from simulator.errors import UserError
from simulator.model import (
    hardware_flops,
    korthikanti_model_flops,
    layer_flops,
    load_hf_config,
    load_model_preset,
    model_flops,
    narayanan_full_recompute_flops,
    param_counts,
    preset_names,
)
from simulator.plan.shape import rank_shape


@pytest.mark.parametrize(("name", "total", "active", "rel"), [
    ("gpt3-175b", 175e9, None, 0.005),          # Brown et al. 2020: 175B
    ("llama3-8b", 8.03e9, None, 0.0005),        # Meta: 8.03B
    ("llama3-70b", 70.6e9, None, 0.001),        # Meta: 70.6B
    ("llama3-405b", 405.9e9, None, 0.001),      # Meta: 405B (405.85B counted)
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.002),    # Mistral: 46.7B total, 12.9B active
    ("deepseek-v3", 671e9, 37e9, 0.015),        # DeepSeek-V3: 671B total, 37B active
    ("gpt-oss-120b", 117e9, None, 0.002),       # OpenAI model card: 116.8B
])
def test_preset_param_counts_match_published(name, total, active, rel):
    counts = param_counts(load_model_preset(name))
    assert counts["total"] == pytest.approx(total, rel=rel)
    if active is not None:
        assert counts["active"] == pytest.approx(active, rel=rel)


def test_llama3_8b_exact_count():
    assert param_counts(load_model_preset("llama3-8b"))["total"] == 8_030_261_248
    assert param_counts(load_model_preset("llama3-70b"))["total"] == 70_553_706_496


def test_korthikanti_presets_and_names():
    names = preset_names()
    for n in ("korthikanti-22b", "korthikanti-175b", "korthikanti-530b", "korthikanti-1t", "gpt3-175b",
              "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b"):
        assert n in names
    m = load_model_preset("korthikanti-1t")
    assert (m.layers, m.hidden, m.heads, m.vocab) == (128, 25600, 160, 51200)


def test_unknown_preset_lists_accepted():
    with pytest.raises(UserError, match="unknown model preset 'gpt5'.*accepted: deepseek-v3") as e:
        load_model_preset("gpt5")
    assert e.value.key_path == "model.preset"


@pytest.mark.parametrize("name", ["gpt3-175b", "korthikanti-22b"])
def test_model_flops_equals_korthikanti_72_formula(name):
    m = load_model_preset(name)
    s, b = 2048, 3
    expected = korthikanti_model_flops(b, m.layers, s, m.hidden, m.vocab)
    assert model_flops(m, s, b, causal=False) == pytest.approx(expected, rel=1e-12)


def test_full_recompute_equals_narayanan_96_formula():
    m = load_model_preset("korthikanti-175b")
    s, b = 2048, 2
    got = hardware_flops(m, s, b, recompute="full", causal=False, attention="unfused")
    assert got == pytest.approx(narayanan_full_recompute_flops(b, m.layers, s, m.hidden, m.vocab), rel=1e-12)


def test_layer_forward_is_24bsh2_plus_4bs2h_and_backward_twice():
    m = load_model_preset("korthikanti-22b")
    s, b, h = 2048, 4, m.hidden
    f = layer_flops(m, rank_shape(m, s, b), causal=False, attention="unfused")
    assert f.forward_flops == pytest.approx(24 * b * s * h**2 + 4 * b * s**2 * h, rel=1e-12)
    assert f.backward_flops == pytest.approx(2 * f.forward_flops, rel=1e-12)
    causal = layer_flops(m, rank_shape(m, s, b), causal=True)
    assert f.forward_flops - causal.forward_flops == pytest.approx(2 * b * s**2 * h, rel=1e-12)


def test_layer_ops_carry_gemm_shapes_per_rank():
    m = load_model_preset("llama3-70b")
    f = layer_flops(m, rank_shape(m, 8192, 1, tp=8, cp=2))
    ops = {o.name: o for o in f.ops}
    q = ops["q_proj"]
    assert (q.m, q.k, q.n) == (4096, 8192, 8192 / 8)
    assert (ops["k_proj"].n, ops["mlp.fc1"].n, ops["mlp.fc2"].k) == (128, 2 * 28672 / 8, 28672 / 8)
    qk = ops["attn.qk"]
    assert (qk.m, qk.k, qk.n, qk.batch, qk.density) == (4096, 128, 8192, 64 / 8, 0.5)
    assert ops["q_proj.wgrad"].m == 8192 and ops["q_proj.dgrad"].n == 8192
    assert f.recompute_flops > 0                                    # flash recomputes QK^T in backward


def test_moe_layer_ops_group_local_experts():
    m = load_model_preset("mixtral-8x7b")
    f = layer_flops(m, rank_shape(m, 4096, 1, ep=8))
    fc1 = next(o for o in f.ops if o.name == "experts.fc1")
    assert fc1.batch == 1 and fc1.m == 4096 * 2 and fc1.n == 2 * 14336


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def test_hf_llama_config_matches_preset(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
           "max_position_embeddings": 8192}
    assert param_counts(load_hf_config(_write(tmp_path, cfg)))["total"] == 8_030_261_248


def test_hf_mixtral_and_deepseek_configs(tmp_path):
    mix = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2}
    assert param_counts(load_hf_config(_write(tmp_path, mix)))["total"] == param_counts(
        load_model_preset("mixtral-8x7b"))["total"]
    ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
          "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256,
          "n_shared_experts": 1, "moe_intermediate_size": 2048, "num_experts_per_tok": 8,
          "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
          "qk_rope_head_dim": 64, "v_head_dim": 128, "moe_layer_freq": 1}
    assert param_counts(load_hf_config(_write(tmp_path, ds)))["total"] == param_counts(
        load_model_preset("deepseek-v3"))["total"]


def test_hf_qwen2_has_qkv_bias(tmp_path):
    cfg = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
           "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
    m = load_hf_config(_write(tmp_path, cfg))
    assert m.has_qkv_bias and m.tied_embeddings
    assert param_counts(m)["total"] == pytest.approx(494e6, rel=0.002)   # Qwen2-0.5B: 0.49B


def test_hf_config_errors(tmp_path):
    with pytest.raises(UserError, match="unsupported model_type 'bert'"):
        load_hf_config(_write(tmp_path, {"model_type": "bert"}))
    with pytest.raises(UserError, match="lacks field 'num_hidden_layers'"):
        load_hf_config(_write(tmp_path, {"model_type": "llama", "num_attention_heads": 2}))
    with pytest.raises(UserError, match="no such file"):
        load_hf_config(tmp_path / "missing.json")
