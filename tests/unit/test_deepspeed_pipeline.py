"""The deepspeed profile's pipeline engine and BF16 optimizer (docs/implementation_profiles.md, "DeepSpeed"):
separate blocking receives (``pipeline_p2p: separate``) and BF16_Optimizer's data-parallel and tied-embedding
synchronisation (``bf16_grad_sync: all_reduce``), checked by hand on Korthikanti's 22B model (h 6144, 48 layers,
vocab 51200, tied embeddings, learned positions) at TP 1, PP 4, DP 2, ZeRO-1, micro-batch 1 of 2048 tokens."""

from types import SimpleNamespace

import pytest

from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.schedule.chunks import boundary_cost
from simulator.schedule.costs import Cost
from simulator.traffic import data_parallel_traffic, pipeline_traffic

H, V, S, LAYERS_PER_STAGE = 6144, 51200, 2048, 12
LAYER_PARAMS = 12 * H * H + 13 * H           # qkv, proj, fc1, fc2 weights and biases, two LayerNorms
TAU = 1e-3                                   # a stub transfer: 1 ms per call


def _plan(framework: str, precision: str = "bf16"):
    return resolve_plan(load_model_preset("korthikanti-22b"), dict(tp=1, pp=4, dp=2, zero=1),
                        dict(seq_len=S, micro_batch=1, global_batch=8, precision=precision, framework=framework), 8)


def test_separate_receives_are_two_more_boundary_ops_of_the_same_size():
    """b s h x 2 B / tp = 1 x 2048 x 6144 x 2 = 25,165,824 B each way; DeepSpeed receives them in calls of
    their own (pipe/schedule.py TrainSchedule: RecvActivation, RecvGrad), Megatron pairs them with its sends."""
    ds = pipeline_traffic(_plan("deepspeed"))
    mg = pipeline_traffic(_plan("megatron"))
    assert [o.name for o in mg] == ["activations", "activation gradients"]
    assert [o.name for o in ds] == ["activations", "activation gradients", "activations (receive)",
                                    "activation gradients (receive)"]
    assert {o.bytes for o in ds} == {S * H * 2} == {25_165_824}
    assert all(o.op == "sendrecv" and o.group == "pp_pair" for o in ds)


@pytest.mark.parametrize(("framework", "per_stage"), [
    # (forward, backward) transfer calls of stages 0..3 on the critical path of each op
    ("megatron", [(1, 0), (1, 1), (1, 1), (0, 1)]),     # F sends its output, B sends its input gradient
    ("deepspeed", [(1, 1), (2, 2), (2, 2), (1, 1)]),    # ... and each receive blocks the receiver too
])
def test_blocking_transfers_charged_to_each_pass(framework, per_stage):
    """With a 1 ms stub per transfer a middle stage's forward pays its send and its receive (2 ms) under
    DeepSpeed against 1 ms under Megatron; the first stage receives gradients, the last receives activations."""
    ops = pipeline_traffic(_plan(framework))
    timer = SimpleNamespace(time=lambda op, stage: SimpleNamespace(call_s=TAU, on_network=True))
    for stage, (n_fwd, n_bwd) in enumerate(per_stage):
        fwd, bwd = Cost(), Cost()
        boundary_cost(timer, ops, 4, 1, stage, 0, fwd, bwd)
        assert (fwd.comm["pp"], bwd.comm["pp"]) == pytest.approx((n_fwd * TAU, n_bwd * TAU)), stage
        assert (fwd.exposed["pp"], bwd.exposed["pp"]) == pytest.approx((n_fwd * TAU, n_bwd * TAU)), stage


def test_bf16_optimizer_all_reduces_the_gradient_and_gathers_bf16_parameters():
    """Stage 1 holds 12 layers: 12 x (12 h^2 + 13 h) = 5,436,776,448 parameters, 2 B each on the wire (bf16,
    DeepSpeed's communication_data_type): the whole gradient all-reduced (engine.py _bf16_reduce_grads), then the
    updated bf16 shards all-gathered (bf16_optimizer.py step: all_gather_dp_groups). Megatron's distributed
    optimizer reduce-scatters the same bytes."""
    params = LAYERS_PER_STAGE * LAYER_PARAMS
    assert params == 5_436_776_448
    ds = [(o.op, o.bytes, o.name) for o in data_parallel_traffic(_plan("deepspeed"), 1)]
    mg = [(o.op, o.bytes, o.name) for o in data_parallel_traffic(_plan("megatron"), 1)]
    assert ds == [("all_reduce", 2 * params, "dense gradients"), ("all_gather", 2 * params, "dense parameters")]
    assert mg == [("reduce_scatter", 2 * params, "dense gradients"), ("all_gather", 2 * params, "dense parameters")]


def test_tied_embedding_gradient_syncs_in_fp32_under_the_bf16_optimizer():
    """engine.py _exec_reduce_tied_grads all-reduces ``weight._hp_grad`` (fp32) under bf16: 51200 x 6144 x 4 B =
    1,258,291,200 B between the first and last stage, twice Megatron's bf16 gradient (629,145,600 B)."""
    def tied(framework, precision="bf16"):
        return [o.bytes for o in data_parallel_traffic(_plan(framework, precision), 0)
                if o.name == "tied embedding gradients"]
    assert tied("deepspeed") == [V * H * 4] == [1_258_291_200]
    assert tied("megatron") == [V * H * 2] == [629_145_600]


def test_fp16_zero1_keeps_the_sharded_reduction():
    """MT-NLG's fp16 ZeRO-1 is not the BF16_Optimizer path (engine.py _exec_reduce_grads branches on
    bfloat16_enabled): reduce-scatter, and the tied gradient in fp16, as Megatron; the receives still apply."""
    rp = _plan("deepspeed", "fp16")
    ops = [(o.op, o.name) for o in data_parallel_traffic(rp, 0)]
    assert ops == [("reduce_scatter", "dense gradients"), ("all_gather", "dense parameters"),
                   ("all_reduce", "tied embedding gradients")]
    assert [o.bytes for o in data_parallel_traffic(rp, 0) if o.name.startswith("tied")] == [V * H * 2]
    assert len(pipeline_traffic(rp)) == 4


def test_alibi_in_unfused_attention_writes_and_reads_the_bias_once_per_score():
    """BLOOM's layer at TP 4, micro-batch 2: 112 / 4 = 28 local heads, scores 2 x 28 x 2048 x 2048 = 234,881,024;
    Megatron-DeepSpeed's baddbmm(alibi, q, k^T, beta) writes the expanded bias (2 B) and the GEMM reads it back as
    C (2 B): 939,524,096 B in the forward, nothing in the backward, no RoPE; a flash kernel adds the bias on chip."""
    from simulator.model import ModelSpec
    from simulator.program.memops import LayerShape, layer_memops

    def model(position):
        return ModelSpec(name="bloom-like", layers=70, hidden=14336, heads=112, vocab=250880, activation="gelu",
                         norm="layernorm", linear_bias=True, position_embedding=position)
    scores = 2 * 28 * 2048 * 2048
    assert scores == 234_881_024
    shape = LayerShape(tokens=4096, norm_tokens=4096, scores=scores, ffn_local=4 * 14336 / 4, qk_width=2 * 28 * 128)
    alibi = {(o.name, o.phase): o for o in layer_memops(model("alibi"), shape, unfused_attention=True)}
    rope = {(o.name, o.phase): o for o in layer_memops(model("rope"), shape, unfused_attention=True)}
    assert alibi[("alibi", "fwd")].bytes == 4 * scores == 939_524_096 and alibi[("alibi", "fwd")].attention
    assert ("alibi", "bwd") not in alibi and ("rope", "fwd") not in alibi and ("rope", "fwd") in rope
    assert set(alibi) - {("alibi", "fwd")} == set(rope) - {("rope", "fwd"), ("rope", "bwd")}
    assert not [o for o in layer_memops(model("alibi"), shape, unfused_attention=False) if o.name == "alibi"]
