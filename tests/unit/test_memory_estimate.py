"""Memory report: schedules, framework accounting, CP/Ulysses/MoE activations, CONTRACT keys, OOM, tables."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.memory import (
    ActContext,
    estimate_memory,
    in_flight,
    layer_activation_bytes,
    layer_activation_items,
)
from simulator.model import ModelSpec, load_model_preset
from simulator.plan import resolve_plan
from simulator.report.memory import render_items, render_memory_table
from simulator.units.constants import GiB

GPT = ModelSpec(layers=4, hidden=1024, heads=16, vocab=50304)


def test_schedules_in_flight():
    assert in_flight("1f1b", 8, 1, 0, 64) == 8 and in_flight("1f1b", 8, 1, 7, 64) == 1
    assert in_flight("1f1b", 8, 1, 0, 3) == 3
    assert in_flight("gpipe", 8, 1, 3, 64) == 64
    p, v = 8, 3       # Korthikanti: first stage x (1 + (p-1)/(p*v))
    assert in_flight("1f1b", p, v, 0, 64) == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_pytorch_accounting_by_hand():
    """GPT layer, plain PyTorch, SDPA flash, no dropout: 32*T*h + 4*T*a (lse) + 16*T (two LayerNorm mean/rstd).

    Per T*h bytes: norm inputs 2 + 2, qkv and fc1 inputs 2 + 2, q, k, v 6, SDPA output 2 (also o_proj's input: the
    kernel writes (b, s, heads, d), so transpose + reshape is a view), GeLU input 8 and fc2 input 8 (f = 4h)."""
    s, b, h, a = 1024, 2, GPT.hidden, GPT.heads
    t = s * b
    got = layer_activation_bytes(GPT, ActContext.build(GPT, seq_len=s, micro_batch=b, framework="pytorch", attention="flash"))
    assert got == 32 * t * h + 4 * t * a + 16 * t
    names = [n for n, _, _ in layer_activation_items(GPT, ActContext.build(GPT, seq_len=s, micro_batch=b, framework="pytorch",
                                                                     attention="flash"))]
    assert "attn.sdpa_out" in names and "attn.proj_in" not in names and not any("dropout" in n for n in names)


def test_swiglu_megatron_vs_pytorch():
    m = load_model_preset("llama3-8b")
    c = dict(seq_len=4096, micro_batch=1, attention="flash")
    t, h, f = 4096, m.hidden, m.ffn
    mg = dict((n, x) for n, x, _ in layer_activation_items(m, ActContext.build(m, **c)))
    assert mg["mlp.act_in"] == 2 * t * 2 * f and mg["mlp.fc2_in"] == 2 * t * f
    pt = dict((n, x) for n, x, _ in layer_activation_items(m, ActContext.build(m, **c, framework="pytorch")))
    assert sum(v for k, v in pt.items() if k.startswith("mlp.") and "_in" in k and "norm" not in k) > 0
    assert pt["attn.k"] == 2 * t * h          # repeat_kv expands K to all heads in plain PyTorch
    assert mg["attn.k"] == 2 * t * h * 8 / 32  # Megatron keeps GQA K (8 of 32 heads)


def test_cp_divides_sequence_activations():
    m = load_model_preset("llama3-8b")
    base = layer_activation_bytes(m, ActContext.build(m, seq_len=8192, micro_batch=1, attention="flash"))
    cp4 = layer_activation_bytes(m, ActContext.build(m, seq_len=8192, micro_batch=1, cp=4, attention="flash"))
    assert cp4 == pytest.approx(base / 4)


def test_ulysses_replicates_kv_heads_beyond_kv_count():
    m = load_model_preset("llama3-8b")      # 8 kv heads
    items = {n: x for n, x, _ in layer_activation_items(
        m, ActContext.build(m, seq_len=8192, micro_batch=1, ulysses=16, attention="flash"))}
    # each rank holds 1 K head of 128 over the full sequence
    assert items["attn.k"] == 2 * 8192 * 1 * 128
    assert items["attn.q"] == 2 * 8192 * (32 / 16) * 128


def test_moe_expected_worst_and_capacity():
    m = load_model_preset("mixtral-8x7b")
    rp = resolve_plan(m, {"ep": 8}, {"seq_len": 4096, "global_batch": 8}, 8)
    stage = estimate_memory(rp).stages[0]
    assert stage.moe_worst_case_activations > stage.bucket("activations") * 0.9
    exp = {n: x for n, x, _ in layer_activation_items(m, ActContext.build(m, seq_len=4096, micro_batch=1, ep=8),
                                                      moe_layer=True)}
    worst = {n: x for n, x, _ in layer_activation_items(
        m, ActContext.build(m, seq_len=4096, micro_batch=1, ep=8, moe_load="worst"), moe_layer=True)}
    assert exp["moe.experts.fc1_in"] == 2 * 4096 * 2 * m.hidden
    assert worst["moe.experts.fc1_in"] == 2 * 4096 * 8 * 1 * m.hidden      # all 8 ranks' tokens, 1 local expert
    capped = m.model_copy(update={"moe": m.moe.model_copy(update={"capacity_factor": 1.25})})
    cap = {n: x for n, x, _ in layer_activation_items(capped, ActContext.build(capped, seq_len=4096, micro_batch=1, ep=8),
                                                      moe_layer=True)}
    assert cap["moe.experts.fc1_in"] == pytest.approx(1.25 * exp["moe.experts.fc1_in"])


def test_contract_keys_and_totals():
    rp = resolve_plan(load_model_preset("llama3-70b"), {"tp": 8, "pp": 4, "sp": True, "distributed_optimizer": True},
                      {"seq_len": 4096, "global_batch": 32}, 64)
    report = estimate_memory(rp, hbm_capacity_bytes=80 * GiB)
    d = report.to_dict()
    assert set(d) == {"peak_bytes", "device_peak_bytes", "runtime_bytes", "nccl_bytes", "stages"}
    assert d["device_peak_bytes"] == pytest.approx(d["peak_bytes"] + (0.75 + 0.77) * GiB)   # measured on H200
    assert set(d["stages"][0]) == {"stage", "weights", "gradients", "main_params", "optimizer", "activations",
                                   "other", "total", "peak"}
    for s in d["stages"]:
        assert s["total"] == pytest.approx(sum(s[k] for k in ("weights", "gradients", "main_params", "optimizer",
                                                              "activations", "other")))
    assert report.peak_bytes >= max(s["total"] for s in d["stages"])
    acts = [s["activations"] for s in d["stages"]]
    assert acts[0] > acts[1] > acts[2]          # 1F1B: stage i holds p - i micro-batches
    assert not report.oom and report.margin_bytes > 0


def test_oom_flag_and_tables():
    rp = resolve_plan(load_model_preset("llama3-70b"), {"tp": 1}, {"seq_len": 4096, "global_batch": 8}, 1)
    report = estimate_memory(rp, hbm_capacity_bytes=80 * GiB)
    assert report.oom and report.margin_bytes < 0
    table = render_memory_table(report)
    assert "OUT OF MEMORY" in table and "weights" in table and "main_params" in table
    items = render_items(report, 0)
    assert "attn.qkv_in" in items and "x 80 layers" in items


def test_pp_tied_embedding_copy_on_last_stage():
    rp = resolve_plan(load_model_preset("korthikanti-22b"), {"pp": 4}, {"seq_len": 2048, "global_batch": 8}, 4)
    report = estimate_memory(rp)
    w = [s.bucket("weights") for s in report.stages]
    assert w[0] > w[1] and w[3] > w[2]


def test_zero3_adds_gathered_layers_to_peak_only():
    rp = resolve_plan(load_model_preset("llama3-8b"), {"zero": 3},
                      {"seq_len": 2048, "global_batch": 8, "framework": "pytorch", "precision": "amp_bf16"}, 8)
    stage = estimate_memory(rp).stages[0]
    transient = {i.name: i.bytes for i in stage.items if i.bucket == "transient"}
    assert "zero3.gathered_layers" in transient
    # PyTorch frees gradients between steps: activations (start of backward) and gradients (end) never peak together
    assert stage.gradients_freed
    overlap = min(stage.bucket("activations"), stage.bucket("gradients"))
    assert stage.peak == pytest.approx(stage.total - overlap + sum(transient.values()))


def test_full_recompute_keeps_layer_inputs():
    m = load_model_preset("llama3-8b")
    rp = resolve_plan(m, {"tp": 4, "sp": True, "recompute": "full"}, {"seq_len": 4096, "global_batch": 4}, 4)
    stage = estimate_memory(rp).stages[0]
    layer = sum(i.bytes for i in stage.items if i.name == "layer_input")
    assert layer == 2 * 4096 * m.hidden / 4 * m.layers


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(2, 8), vpp=st.integers(1, 4), groups=st.integers(1, 6), stage=st.integers(0, 7),
       schedule=st.sampled_from(["1f1b", "gpipe"]))
def test_in_flight_from_the_orders_equals_the_closed_forms(pp, vpp, groups, stage, schedule):
    """Memory's in-flight count is derived from the pipeline's op orders; it equals the published closed forms
    (1F1B min(p - i, m); interleaved min(2(p - i - 1) + (v - 1)p + 1, m v)/v; GPipe m)."""
    if schedule == "gpipe" and vpp > 1:
        vpp = 1
    stage, m = stage % pp, groups * pp
    if schedule == "gpipe":
        expected = m
    elif vpp == 1:
        expected = min(pp - stage, m)
    else:
        expected = min(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp) / vpp
    assert in_flight(schedule, pp, vpp, stage, m) == pytest.approx(expected)
