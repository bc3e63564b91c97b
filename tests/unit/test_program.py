"""The program (simulator.program): a layer's ops by hand on Llama-3-8B, dtypes recorded on the ops, kernel classes,
phases, the communication a layer kind implies, and that the ops are frozen values."""

import dataclasses

import pytest

from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.plan.shape import rank_shape
from simulator.program import (
    PERMUTE_CHAINS,
    embedding_program,
    expert_ffn_program,
    head_program,
    layer_program,
    plan_layer_program,
)
from simulator.traffic import layer_traffic

S = 4096
LLAMA = load_model_preset("llama3-8b")   # h 4096, 32 heads of 128, 8 K/V heads, SwiGLU FFN 14336
#: forward FLOPs of the linear layers per token: 2 x h x (q 4096 + k 1024 + v 1024 + o 4096 + fc1 2 x 14336 + fc2 14336)
LINEAR_PER_TOKEN = 2 * 4096 * (4096 + 1024 + 1024 + 4096 + 28672 + 14336)
#: one score GEMM of flash attention over 4096 x 4096 (causal half) x 128 x 32 heads: 2 x s x s x d x heads / 2
SCORE_GEMM = 2 * S * S * 128 * 32 / 2


def _llama(dtype="bf16", **kw):
    return layer_program(LLAMA, rank_shape(LLAMA, S, 1, **kw.pop("degrees", {})), dtype, layer_index=0, **kw)


def test_a_llama_layer_has_its_gemm_flops_per_phase_by_hand():
    p = _llama()
    tokens = S
    for phase in ("fwd", "bwd_dgrad", "bwd_wgrad"):
        assert sum(o.flops for o in p.gemms_in(phase)) == pytest.approx(LINEAR_PER_TOKEN * tokens, rel=1e-12)
    # flash: Q K^T and P V forward; dQ, dK, dP, dV and the in-kernel recomputation of Q K^T backward (2.5x)
    assert p.attention.fwd_flops == pytest.approx(2 * SCORE_GEMM, rel=1e-12)
    assert p.attention.bwd_flops == pytest.approx(5 * SCORE_GEMM, rel=1e-12)
    assert p.fwd_flops == pytest.approx(LINEAR_PER_TOKEN * tokens + 2 * SCORE_GEMM, rel=1e-12)
    assert p.bwd_flops == pytest.approx(2 * LINEAR_PER_TOKEN * tokens + 5 * SCORE_GEMM, rel=1e-12)
    assert p.attention.seq_len == S and p.attention.dhead == 128 and p.attention.gemms == ()
    assert {o.kernel for o in p.gemms} == {"dense"} and p.kind == "dense" and p.host_issue


def test_tensor_parallel_splits_the_gemms_and_sequence_parallel_the_norms():
    """TP 4 with SP: every linear layer's FLOPs / 4; norm1 reads and writes T/4 x h 16-bit elements forward
    (4 B each: 4 x 1024 x 4096 = 16 MiB) and reads input and gradient and writes the input gradient backward (6 B)."""
    p = _llama(degrees={"tp": 4, "sp": True})
    assert sum(o.flops for o in p.gemms_in("fwd")) == pytest.approx(LINEAR_PER_TOKEN * S / 4, rel=1e-12)
    norm = {o.phase: o.bytes for o in p.memops if o.name == "norm1"}
    assert norm == {"fwd": 4 * 1024 * 4096, "bwd": 6 * 1024 * 4096}
    assert all(o.kernel == "fused" for o in p.memops if o.name.startswith("norm"))


def test_fp8_keeps_router_output_layer_and_attention_in_bf16_on_the_ops():
    m = load_model_preset("mixtral-8x7b")
    sh = rank_shape(m, S, 1, tp=2, ep=4, sp=True)
    p = layer_program(m, sh, "fp8", layer_index=0, fp8_cast_bytes=(1.0, 2.0))
    dtypes = {o.name.split(".")[0]: o.dtype for o in p.gemms}
    assert dtypes["router"] == "bf16" and dtypes["q_proj"] == "fp8" and dtypes["experts"] == "fp8"
    assert p.attention.dtype == "bf16"
    head = head_program(m, sh, "fp8")
    assert {o.dtype for o in head.gemms} == {"bf16"}
    assert {o.dtype for o in _llama("fp4").gemms} == {"fp4"} and _llama("fp4").attention.dtype == "bf16"
    # the quantization casts: q_proj's input X[T, h] at 1 B/element forward, its output gradient dY[T, h/tp] at 2 B
    casts = {o.name: o.bytes for o in p.memops if o.name.startswith("q_proj.fp8")}
    assert casts == {"q_proj.fp8_cast_input": 1.0 * S * 4096, "q_proj.fp8_cast_grad": 2.0 * S * 4096 / 2}
    assert not any(o.name.startswith("router.fp8") for o in p.memops)


def test_expert_kernels_and_permute_chains_are_recorded():
    m = load_model_preset("mixtral-8x7b")
    sh = rank_shape(m, S, 1, ep=4)
    grouped = layer_program(m, sh, "bf16", layer_index=0)
    assert {o.kernel for o in grouped.gemms if o.name.startswith("experts.")} == {"grouped_expert"}
    seq = layer_program(m, sh, "bf16", layer_index=0, sequential_experts=True,
                        permute=PERMUTE_CHAINS["index_select"])
    assert {o.kernel for o in seq.gemms if o.expert} == {"sequential_expert"}
    kinds = {o.name: o.kernel for o in seq.memops}
    assert kinds["moe_permute"] == "chain" and kinds["expert_assembly"] == "chain"
    assert {o.name: o.kernel for o in grouped.memops}["moe_permute"] == "fused"
    # R = T x top-2 = 8192 routed rows; the fused permute + unpermute move 8 B per R x h element each way
    assert {o.phase: o.bytes for o in grouped.memops if o.name == "moe_permute"} == {
        "fwd": 8 * S * 2 * 4096, "bwd": 8 * S * 2 * 4096}
    assert grouped.kind == "moe" and grouped.local_experts == 2


def test_unfused_attention_carries_its_score_gemms_in_16_bits():
    p = _llama("fp8", attention="unfused")
    assert p.attention.kernel == "unfused" and not p.attention.fused
    assert {o.dtype for o in p.attention.gemms} == {"bf16"}
    # full s x s scores: twice the causal FLOPs, no in-kernel recomputation
    assert p.attention.fwd_flops == pytest.approx(4 * SCORE_GEMM, rel=1e-12)
    assert p.attention.bwd_flops == pytest.approx(8 * SCORE_GEMM, rel=1e-12)
    assert {o.name for o in p.memops if o.attention} == {"softmax"}   # Llama has no attention dropout


def test_a_forward_only_phase_keeps_forward_ops():
    p = _llama(phases=frozenset({"fwd"}))
    assert {o.phase for o in p.gemms} == {"fwd"} and {o.phase for o in p.memops} == {"fwd"}
    assert p.bwd_flops == 0.0 and p.attention.bwd_flops == 0.0
    assert p.fwd_flops == _llama().fwd_flops


def test_head_embedding_and_expert_programs():
    sh = rank_shape(LLAMA, S, 1, tp=2)
    head = head_program(LLAMA, sh, "bf16")
    # output layer: T x h x v/tp (vocab 128256) forward
    assert head.fwd_flops == pytest.approx(2 * S * 4096 * 128256 / 2, rel=1e-12)
    assert {o.name for o in head.memops} == {"final_norm", "cross_entropy"} and not head.host_issue
    emb = embedding_program(LLAMA, sh)
    assert emb.gemms == () and {(o.name, o.phase): o.bytes for o in emb.memops} == {
        ("embedding", "fwd"): 4 * S * 4096, ("embedding", "bwd"): 10 * S * 4096}
    m = load_model_preset("mixtral-8x7b")
    ex = expert_ffn_program(m, "fp8", [100, 100, 300, 0], etp=1)
    assert {(o.m, o.batch) for o in ex.gemms_in("fwd")} == {(100.0, 2), (300.0, 1)}
    assert {o.kernel for o in ex.gemms} == {"grouped_expert"} and {o.dtype for o in ex.gemms} == {"fp8"}


def test_layer_programs_reference_the_collectives_of_their_kind():
    m = load_model_preset("mixtral-8x7b")
    rp = resolve_plan(m, {"tp": 2, "sp": True, "ep": 4, "cp": 2}, {"seq_len": S, "micro_batch": 1,
                                                                       "global_batch": 16}, 16)
    traffic = layer_traffic(rp)
    moe = layer_program(m, rp.shape, "bf16", layer_index=0, comm=traffic)
    assert {o.dim for o in moe.comm} == {"tp", "ep", "cp"}
    assert all(o.layer in ("moe", "any") for o in moe.comm)
    assert len(moe.comm) == len(traffic)   # Mixtral has no dense layers: every per-layer op is a MoE layer's
    # from the plan: the same ops, the recipe's choices read once
    assert plan_layer_program(rp, "bf16", layer_index=0) == moe
    fp8 = resolve_plan(m, {"tp": 2, "sp": True, "ep": 4}, {"seq_len": S, "micro_batch": 1, "global_batch": 16,
                                                           "precision": "fp8"}, 8)
    cast = {o.name: o.bytes for o in plan_layer_program(fp8, "fp8", layer_index=0).memops}
    assert cast["q_proj.fp8_cast_input"] == fp8.recipe.fp8_cast_bytes[0] * S * 4096


def test_programs_are_frozen_hashable_values():
    a, b = _llama(), _llama()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert _llama(eager=True) != a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.gemms[0].m = 1
