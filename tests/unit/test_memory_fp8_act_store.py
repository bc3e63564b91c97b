"""Megatron --activation-func-fp8-input-store (``training.activation_func_fp8_input_store``): the fused bias-SwiGLU
keeps its input for backward as float8_e4m3fn (megatron/core/fusions/fused_bias_swiglu.py at d98e8a64:
``input_for_backward = input.to(torch.float8_e4m3fn) if fp8_input_store else input``), in dense MLPs, MoE experts
and shared experts (issue 28 item 3, FP8 caching of selected activations)."""

import pytest

from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.model import ModelSpec
from simulator.model.spec import MoESpec
from simulator.plan import resolve_plan

LLAMA = ModelSpec(layers=4, hidden=1024, heads=16, kv_heads=4, ffn_hidden=2816, vocab=32000, activation="swiglu",
                  norm="rmsnorm")


def _items(model, **training):
    rp = resolve_plan(model, {}, {"seq_len": 1024, "global_batch": 8} | training, 8)
    return {i.name: i.bytes for i in estimate_memory(rp).stages[0].items}


def test_swiglu_input_is_kept_in_one_byte():
    """T = 1024 tokens, f = 2816: the SwiGLU input (gate and up) is 2 x 1024 x 2816 elements per layer; bf16 keeps
    2 B each, 11,534,336 B per layer, 46,137,344 B over 4 layers; fp8 keeps 1 B, 23,068,672 B. Nothing else moves."""
    bf16, fp8 = _items(LLAMA), _items(LLAMA, activation_func_fp8_input_store=True)
    assert bf16["mlp.act_in"] == 4 * 2 * 1024 * 2 * 2816 == 46_137_344
    assert fp8["mlp.act_in"] == 4 * 1 * 1024 * 2 * 2816 == 23_068_672
    assert {k: v for k, v in fp8.items() if k != "mlp.act_in"} == {k: v for k, v in bf16.items() if k != "mlp.act_in"}


def test_moe_experts_store_it_too():
    """Routed and shared expert MLPs use the same fused kernel (megatron/core/transformer/moe/experts.py,
    shared_experts.py): their SwiGLU inputs halve as well."""
    moe = LLAMA.model_copy(update={"moe": MoESpec(experts=8, top_k=2, expert_ffn_hidden=1408, shared_experts=1)})
    base, low = _items(moe, micro_batch=1), _items(moe, activation_func_fp8_input_store=True)
    for name in ("moe.experts.act_in", "moe.shared.act_in"):
        assert low[name] == base[name] / 2
    assert low["moe.experts.fc2_in"] == base["moe.experts.fc2_in"]


@pytest.mark.parametrize("model, training", [
    (ModelSpec(layers=4, hidden=1024, heads=16, vocab=32000), {}),          # GeLU: Megatron refuses it
    (LLAMA, {"framework": "pytorch"}),
])
def test_only_megatron_swiglu(model, training):
    with pytest.raises(UserError, match="activation_func_fp8_input_store") as err:
        resolve_plan(model, {}, {"global_batch": 8, "activation_func_fp8_input_store": True} | training, 8)
    assert err.value.key_path == "training.activation_func_fp8_input_store"
