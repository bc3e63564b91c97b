"""torchtitan's per-op selective activation checkpointing (``parallel.selective_ac_option: op``; torchtitan
torchtitan/distributed/activation_checkpoint.py at b5bcd76c, SelectiveAC): saved tensors counted by hand (issue 28
item 3)."""

import pytest

from simulator.errors import UserError
from simulator.memory import ActContext, estimate_memory, layer_activation_items
from simulator.model import ModelSpec
from simulator.plan import resolve_plan

LLAMA = ModelSpec(layers=4, hidden=1024, heads=16, kv_heads=4, ffn_hidden=2816, vocab=32000, activation="swiglu",
                  norm="rmsnorm")
T, H = 2 * 1024, 1024


def _op_sac(model):
    ctx = ActContext.build(model, seq_len=1024, micro_batch=2, framework="pytorch", attention="flash",
                           recompute="selective", selective_op=True)
    return {n: b for n, b, _ in layer_activation_items(model, ctx)}


def test_llama_block_keeps_the_odd_matmuls_and_sdpa():
    """Forward mm order wq, wk, wv, wo, w1, w3, w2: #1, 3, 5, 7 saved (wq 2T x 1024, wv 2T x 4 x 64, w1 2T x 2816,
    w2 2T x 1024), #2, 4, 6 (wk, wo, w3) recomputed; SDPA output 2T x 16 x 64 and fp32 logsumexp 4T x 16; the block
    input 2Th. T = 2048: 4,194,304 + 4,194,304 + 1,048,576 + 11,534,336 + 4,194,304 + 4,194,304 + 131,072 =
    29,491,200 B per layer (the same layer keeps 79,839,232 B without checkpointing)."""
    got = _op_sac(LLAMA)
    assert got == {"layer_input": 2 * T * H, "sac.wq_out": 2 * T * 1024, "sac.wv_out": 2 * T * 256,
                   "sac.w1_out": 2 * T * 2816, "sac.w2_out": 2 * T * H, "sac.sdpa_out": 2 * T * 1024,
                   "sac.sdpa_lse": 4 * T * 16}
    assert sum(got.values()) == 29_491_200


def test_stage_and_recomputed_layer():
    """4 layers x 29,491,200 + final norm and output-layer inputs 2 x 2Th = 126,353,408 B of activations; the layer
    rebuilt in backward is the full layer less what was saved, 79,839,232 - 29,491,200 = 50,348,032 B."""
    rp = resolve_plan(LLAMA, {"recompute": "selective", "selective_ac_option": "op"},
                      {"seq_len": 1024, "micro_batch": 2, "global_batch": 2, "framework": "pytorch",
                       "precision": "pure_bf16"}, 1)
    st = estimate_memory(rp).stages[0]
    assert st.bucket("activations") == 4 * 29_491_200 + 2 * 2 * T * H == 126_353_408
    assert sum(i.bytes for i in st.items if i.name == "recompute.layer") == 50_348_032


def test_biased_projections_are_addmm_saved_without_counting():
    """Qwen2-style q/k/v biases: wq, wk, wv run as addmm (saved, not counted), so the counted mms are wo (#1,
    saved), w1 (#2, recomputed), w3 (#3, saved), w2 (#4, recomputed)."""
    qwen = LLAMA.model_copy(update={"qkv_bias": True})
    names = set(_op_sac(qwen))
    assert names == {"layer_input", "sac.wq_out", "sac.wk_out", "sac.wv_out", "sac.wo_out", "sac.w3_out",
                     "sac.sdpa_out", "sac.sdpa_lse"}


@pytest.mark.parametrize("parallel, training, why", [
    ({"recompute": "full"}, {"framework": "pytorch"}, "needs selective"),
    ({"recompute": "selective"}, {"framework": "megatron"}, "framework pytorch"),
    ({"recompute": "selective", "tp": 2}, {"framework": "pytorch"}, "tp 2"),
])
def test_unmodelled_combinations_are_refused(parallel, training, why):
    with pytest.raises(UserError, match=why) as err:
        resolve_plan(LLAMA, parallel | {"selective_ac_option": "op"}, {"global_batch": 8} | training,
                     parallel.get("tp", 1))
    assert err.value.key_path == "parallel.selective_ac_option"
