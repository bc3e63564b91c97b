"""Pricing a program (simulator.pricing.compute): each op kind by hand, how a LayerTime is assembled from the priced
ops, and a grid of layers (dense / MoE / MLA, bf16 / fp8, eager, recompute modes) pinned to the values the
simulator gave before the program existed (commit 53d6a80's ``compute.layer.layer_time``)."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.compute import default_efficiency
from simulator.compute.gemm import gemm_times, peak_flops
from simulator.hardware import load_gpu
from simulator.implementation.profiles import profile_named
from simulator.model import load_model_preset
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import gemm_op_seconds, layer_time, price
from simulator.pricing.host import host_issue_costs
from simulator.program import PERMUTE_CHAINS, AttentionOp, Gemm, LayerProgram, MemOp, layer_program

#: the eager MoE host floor of the megatron profile (measured on the H200)
MEGATRON_HOST = host_issue_costs(profile_named("megatron"))

GPU, EFF = load_gpu("h200_sxm"), default_efficiency("hopper")


def test_memory_bound_ops_run_at_hbm_times_memory_efficiency_plus_a_launch_each():
    p = LayerProgram("embedding", memops=(MemOp("a", "fwd", 3e9), MemOp("b", "fwd", 1e9), MemOp("c", "bwd", 2e9)))
    lt = price(p, GPU, EFF)
    rate = GPU.memory.bandwidth * EFF.memory_efficiency
    assert lt.fwd_s == pytest.approx(4e9 / rate + 2 * EFF.launch_s, rel=1e-12)
    assert lt.bwd_s == pytest.approx(2e9 / rate + EFF.launch_s, rel=1e-12)


def test_gemms_are_priced_in_the_dtype_recorded_on_the_op():
    ops = (Gemm("router", "fwd", 4096, 4096, 64, dtype="bf16"), Gemm("q_proj", "fwd", 4096, 4096, 4096, dtype="fp8"))
    secs = gemm_op_seconds(ops, GPU, EFF)
    assert secs[0] == pytest.approx(float(gemm_times(4096, 4096, 64, 1, GPU, EFF, "bf16")), rel=1e-12)
    assert secs[1] == pytest.approx(float(gemm_times(4096, 4096, 4096, 1, GPU, EFF, "fp8")), rel=1e-12)


def test_grouped_expert_gemms_run_at_the_grouped_fraction():
    dense = Gemm("experts.fc1", "fwd", 512, 4096, 2048, 8)
    grouped = Gemm("experts.fc1", "fwd", 512, 4096, 2048, 8, kernel="grouped_expert")
    d, g = gemm_op_seconds((dense, grouped), GPU, EFF)
    assert g == pytest.approx(EFF.launch_s + (d - EFF.launch_s) / EFF.grouped_fraction("bf16"), rel=1e-12)
    assert g > d


def test_fused_attention_runs_at_its_fitted_fraction_of_the_peak():
    att = AttentionOp(fwd_flops=1e12, bwd_flops=2.5e12, kernel="flash", seq_len=8192, dhead=128, dtype="bf16")
    lt = price(LayerProgram("dense", attention=att), GPU, EFF)
    rate = peak_flops(GPU, "bf16") * EFF.attention_fraction("flash", 8192, 128)
    assert lt.attn_fwd_s == pytest.approx(1e12 / rate + EFF.launch_s, rel=1e-12)
    assert lt.attn_bwd_s == pytest.approx(2.5e12 / rate + EFF.launch_s, rel=1e-12)
    assert lt.fwd_s == lt.attn_fwd_s and lt.attn_fwd_flops == 1e12


def test_a_layer_time_is_the_sum_of_its_priced_ops():
    m = load_model_preset("mixtral-8x7b")
    p = layer_program(m, rank_shape(m, 4096, 1, tp=2, ep=4, sp=True), "fp8", layer_index=0,
                      fp8_cast_bytes=(1.0, 2.0))
    lt = price(p, GPU, EFF, MEGATRON_HOST)
    secs = dict(zip(p.gemms, gemm_op_seconds(p.gemms, GPU, EFF), strict=True))
    rate = GPU.memory.bandwidth * EFF.memory_efficiency
    mem_fwd = sum(o.bytes for o in p.memops_in("fwd")) / rate + EFF.launch_s * len(p.memops_in("fwd"))
    assert lt.fwd_gemm_s == pytest.approx(sum(secs[o] for o in p.gemms_in("fwd")), rel=1e-12)
    assert lt.fwd_s == pytest.approx(lt.fwd_gemm_s + lt.attn_fwd_s + mem_fwd, rel=1e-12)
    assert lt.expert_fwd_s == pytest.approx(sum(secs[o] for o in p.gemms_in("fwd") if o.expert), rel=1e-12)
    assert lt.wgrad_s == pytest.approx(sum(secs[o] for o in p.gemms_in("bwd_wgrad")), rel=1e-12)
    assert lt.fwd_flops == p.fwd_flops and lt.bwd_flops == p.bwd_flops
    # the eager host issue cost of a MoE layer with 2 local experts (simulator.compute.host)
    assert lt.host_fwd_s == pytest.approx(2.259e-3 + 2 * 57.23e-6, rel=1e-12)


MODULES = frozenset({"layernorm", "mlp", "moe", "mla_up_proj"})
#: (model, dtype, attention, tp, ep, keyword arguments) of the last layer at 4096 tokens -> (fwd_s, bwd_s, attn_fwd_s,
#: full recompute s, selective (core attention) s, selective over MODULES s, host_fwd_s) from 53d6a80, on the H200;
#: the two eager cases moved with Hugging Face's RMSNorm / RoPE / SwiGLU / residual chains (EAGER_CHAINS; the
#: llama3-70b amp forward by (2 x 48.9 x 1024 x 8192 + 3.3 x 4096 x 7168 + 48.4 x 4096 x 2304) B / 3.8544e12 B/s
#: = +0.35649 ms: norms, SwiGLU and RoPE; amp keeps its fp32 residual adds; tests/unit/test_hf_chains.py)
PINNED = [
    (("llama3-8b", "bf16", "flash", 1, 1, {}),
     (0.003113734726579709, 0.006224459303328696, 0.0002552386114498186, 0.003113734726579709,
      0.0002552386114498186, 0.0022527947211920087, 0.0)),
    (("llama3-8b", "fp8", "flash", 2, 1, {"fp8_cast_bytes": (1.0, 2.0)}),
     (0.00101078552385549, 0.0019810515408074368, 0.00012895930572490928, 0.00101078552385549,
      0.00012895930572490928, 0.000645154299485206, 0.0)),
    (("llama3-70b", "bf16", "unfused", 4, 1, {"eager": True, "amp": True, "host": True}),
     (0.004422212723035429, 0.007897272744530415, 0.0006289774488352347, 0.004422212723035429,
      0.0006289774488352347, 0.0024338884286778254, 0.0)),
    (("llama3-70b", "bf16", "sdpa", 4, 1, {"grad_accum_bytes": 8.0}),
     (0.0028674335750908868, 0.006191491389972553, 0.0001520998965735476, 0.0028674335750908868,
      0.0001520998965735476, 0.0021959021571958826, 0.0)),
    (("mixtral-8x7b", "bf16", "flash", 2, 4, {"permute": "index_select", "sort_chunks": True}),
     (0.0030928796136052115, 0.006122513668211899, 0.00012895930572490928, 0.0030928796136052115,
      0.00012895930572490928, 0.00264857849980025, 0.0)),
    (("mixtral-8x7b", "fp8", "flash", 2, 4, {"fp8_cast_bytes": (1.0, 2.0), "sequential_experts": True}),
     (0.0016931233663578093, 0.003411615256145062, 0.00012895930572490928, 0.0016931233663578093,
      0.00012895930572490928, 0.0013198748402025525, 0.0)),
    (("deepseek-v3", "fp8_block", "flash", 1, 8, {"fp8_cast_bytes": (1.0, 2.0)}),
     (0.008493008764149951, 0.017162311419277175, 0.0012654730572490929, 0.008493008764149951,
      0.0012654730572490929, 0.005674626651087395, 0.0)),
    (("deepseek-v3", "bf16", "flash", 1, 8, {"fsdp_copy_bytes": (2.0, 4.0), "eager": True, "host": True}),
     (0.01404052798614913, 0.026756107906890904, 0.0012654730572490929, 0.01404052798614913,
      0.0012654730572490929, 0.0073640147091170605, 0.00409036)),
]


@pytest.mark.parametrize(("case", "expected"), PINNED, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c, _ in PINNED])
def test_layer_time_matches_the_values_before_the_program(case, expected):
    name, dtype, attention, tp, ep, kw = case
    m = load_model_preset(name)
    kw = dict(kw)
    if "permute" in kw:
        kw["permute"] = PERMUTE_CHAINS[kw["permute"]]
    if kw.pop("host", False):
        kw["host"] = MEGATRON_HOST
    lt = layer_time(m, rank_shape(m, 4096, 1, tp=tp, ep=ep, sp=tp > 1), GPU, EFF, dtype, layer_index=m.layers - 1,
                    attention=attention, **kw)
    got = (lt.fwd_s, lt.bwd_s, lt.attn_fwd_s, lt.recompute_s("full"), lt.recompute_s("selective"),
           lt.recompute_s("selective", MODULES), lt.host_fwd_s)
    assert got == pytest.approx(expected, rel=1e-12, abs=0.0)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"]),
       dtype=st.sampled_from(["bf16", "fp8", "fp8_block"]), attention=st.sampled_from(["flash", "sdpa", "unfused"]),
       tp=st.sampled_from([1, 2, 4, 8]), ep=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), eager=st.booleans(),
       scale=st.floats(1.0, 4.0))
def test_priced_layers_add_up_and_grow_with_their_bytes(name, dtype, attention, tp, ep, sp, eager, scale):
    """Any layer: the dtypes on the ops are the recipe's or bf16 (router, output layer) only under low precision;
    forward and backward are the sums of their parts; more bytes in every memory-bound op never make it faster."""
    m = load_model_preset(name)
    p = layer_program(m, rank_shape(m, 4096, 1, tp=tp, ep=ep if m.moe else 1, sp=sp and tp > 1), dtype,
                      layer_index=m.layers - 1, attention=attention, eager=eager, fp8_cast_bytes=(1.0, 2.0))
    assert {o.dtype for o in p.gemms} <= {dtype, "bf16"}
    assert all(o.dtype == dtype for o in p.gemms if not o.name.startswith("router"))
    lt = price(p, GPU, EFF)
    other = price(LayerProgram("dense", memops=tuple(o for o in p.memops if not o.attention)), GPU, EFF)
    assert lt.fwd_s == pytest.approx(lt.fwd_gemm_s + lt.attn_fwd_s + other.fwd_s, rel=1e-12)
    assert lt.bwd_s == pytest.approx(lt.dgrad_s + lt.wgrad_s + lt.attn_bwd_s + other.bwd_s, rel=1e-12)
    bigger = dataclasses.replace(p, memops=tuple(dataclasses.replace(o, bytes=o.bytes * scale) for o in p.memops))
    big = price(bigger, GPU, EFF)
    assert big.fwd_s >= lt.fwd_s and big.bwd_s >= lt.bwd_s
