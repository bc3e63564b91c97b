"""Megatron's per-module selective recompute (``parallel.recompute_modules`` = ``--recompute-modules``): what each
module stops keeping and what it re-runs in backward, by hand on a Qwen3-235B-shaped layer."""

import pytest

from simulator.compute.efficiency import default_efficiency
from simulator.errors import UserError
from simulator.hardware.loader import load_gpu
from simulator.memory import ActContext, layer_activation_items
from simulator.model import ModelSpec, load_model_preset
from simulator.plan import resolve_plan
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import layer_time

QWEN3 = ModelSpec(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn_hidden=12288,
                  vocab=151936, activation="swiglu", norm="rmsnorm", position_embedding="rope", qk_norm=True,
                  moe={"experts": 128, "top_k": 8, "expert_ffn_hidden": 1536})
S, TP, EP = 4096, 2, 32


def _items(modules, recompute="selective"):
    c = ActContext.build(QWEN3, seq_len=S, micro_batch=1, tp=TP, sp=True, ep=EP, attention="flash",
                         recompute=recompute, recompute_modules=frozenset(modules) if modules else None)
    return {name: b for name, b, _ in layer_activation_items(QWEN3, c, moe_layer=True)}


def test_layernorm_and_moe_act_drop_the_norm_outputs_and_the_expert_activation_output():
    """TP 2 with SP: r = 4096/2 = 2048 rows of h 4096 (16 MiB in bf16) per norm output; the experts get
    R = 2048 x top-8 = 16384 rows, their SwiGLU output is R x 1536 x 2 B = 48 MiB."""
    full, trimmed = _items(None), _items(["layernorm", "moe_act"])
    dropped = {k: v for k, v in full.items() if k not in trimmed}
    assert dropped == {"attn.qkv_in": 2 * 2048 * 4096, "moe.router_in": 2 * 2048 * 4096,
                       "moe.experts.fc2_in": 2 * 16384 * 1536}
    assert full["moe.experts.act_in"] == trimmed["moe.experts.act_in"] == 2 * 16384 * 2 * 1536  # kept: act's input


def test_moe_module_keeps_only_its_input():
    trimmed = _items(["moe"])
    assert [k for k in trimmed if k.startswith("moe.")] == ["moe.router_in"]


def test_default_selective_is_core_attention_only():
    assert _items(None) == _items(["core_attn"])


def test_recomputed_modules_rerun_their_forward_in_backward():
    """layernorm re-runs the two RMSNorms: each reads and writes r x h in bf16 (4 B per element) at the achievable
    HBM rate, plus one launch each; moe_act re-runs the SwiGLU over R x 1536 (6 B per output element)."""
    gpu, eff = load_gpu("h100_sxm5"), default_efficiency("hopper")
    sh = rank_shape(QWEN3, S, 1, tp=TP, sp=True, ep=EP)
    lt = layer_time(QWEN3, sh, gpu, eff, "bf16", layer_index=0)
    bw = gpu.memory.bandwidth * eff.memory_efficiency
    norms = 2 * (4 * 2048 * 4096 / bw + eff.launch_s)
    act = 6 * 16384 * 1536 / bw + eff.launch_s
    assert lt.recompute_s("selective", frozenset({"layernorm"})) == pytest.approx(norms, rel=1e-12)
    assert lt.recompute_s("selective", frozenset({"moe_act"})) == pytest.approx(act, rel=1e-12)
    assert lt.recompute_s("selective", frozenset({"layernorm", "moe_act"})) == pytest.approx(norms + act, rel=1e-12)
    assert lt.recompute_s("selective") == lt.attn_fwd_s                 # Megatron's default: core_attn
    assert lt.recompute_s("selective", frozenset({"moe"})) > 10 * act  # router, permute, expert GEMMs, activation
    assert lt.recompute_s("full") == lt.fwd_s


@pytest.mark.parametrize("parallel, match", [
    ({"recompute": "full", "recompute_modules": ["layernorm"]}, "need recompute: selective"),
    ({"recompute": "selective", "recompute_modules": ["moe_act", "moe_act"]}, "twice"),
    ({"recompute": "selective", "recompute_modules": ["moe_act"]}, "no MoE layers"),
    ({"recompute": "selective", "recompute_modules": ["mla_up_proj"]}, "no MLA"),
])
def test_bad_recompute_modules_are_refused(parallel, match):
    with pytest.raises(UserError, match=match):
        resolve_plan(load_model_preset("llama3-8b"), parallel, {}, 8)


def test_block_recompute_of_n_layers_per_chunk():
    """Megatron --recompute-method block --recompute-num-layers 4 on a 16-layer stage: 4 layers keep only their
    input (2*s*b*h/t with SP), 12 keep everything; backward re-runs 4 layer forwards (simulate's recompute time is
    4/16 of full recompute's)."""
    from simulator.entries.simulate import simulate
    from simulator.memory import estimate_memory
    from simulator.scenario.load import load_scenario

    m = load_model_preset("llama3-8b")
    base = {"tp": 2, "sp": True, "pp": 2, "recompute": "full"}
    train = {"seq_len": 4096, "global_batch": 8}
    block = resolve_plan(m, {**base, "recompute_layers": 4}, train, 8)
    assert block.layer_recompute(0) == ("full",) * 4 + ("none",) * 12
    full, none = (resolve_plan(m, {**base, "recompute": r}, train, 8) for r in ("full", "none"))

    def acts(rp):
        return sum(i.bytes for i in estimate_memory(rp).stages[0].items if " layers x " in i.formula)
    flight = 2  # stage 0 of a 2-stage 1F1B pipeline holds 2 micro-batches
    per_full, per_none = acts(full) / (16 * flight), acts(none) / (16 * flight)
    assert per_full == 2 * 2048 * 4096                       # the checkpointed layer input, SP shard
    assert acts(block) == pytest.approx(flight * (4 * per_full + 12 * per_none), rel=1e-12)

    def step(parallel):
        doc = {"system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-8b"},
               "parallel": parallel, "training": train}
        return simulate(load_scenario(doc)).step
    assert step({**base, "recompute_layers": 4}).recompute_s == pytest.approx(step(base).recompute_s / 4, rel=1e-9)
    with pytest.raises(UserError, match="needs recompute: full"):
        resolve_plan(m, {"recompute": "selective", "recompute_layers": 2}, train, 8)
