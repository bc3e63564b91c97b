"""Model-state bytes per parameter: every row of sharding_and_comm.md's memory table, exact."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.memory import estimate_memory, stage_params
from simulator.model import load_model_preset
from simulator.plan import ParallelPlan, TrainingConfig, resolve_plan
from simulator.plan import resolve_recipe as recipe_bytes
from simulator.units.constants import GiB

# (strategy, parallel, training, bytes per parameter as a function of d) -- sharding_and_comm.md "Memory per GPU"
ROWS = [
    ("DDP (Megatron)", {}, {}, lambda d: 18),
    ("Megatron distributed optimizer", {"distributed_optimizer": True}, {}, lambda d: 6 + 12 / d),
    ("Megatron-FSDP optim", {"distributed_optimizer": True, "megatron_fsdp": "optim"}, {}, lambda d: 6 + 12 / d),
    ("Megatron-FSDP optim_grads", {"distributed_optimizer": True, "megatron_fsdp": "optim_grads"}, {},
     lambda d: 2 + 16 / d),
    ("Megatron-FSDP optim_grads_params", {"distributed_optimizer": True, "megatron_fsdp": "optim_grads_params"}, {},
     lambda d: 18 / d),
    # 4N + 4N + 8N, plus 4N of DDP gradient buckets when there is more than one replica; a single GPU runs without
    # DDP (sharding_and_comm.md: measured 16.0 B/param on H200, single GPU, no DDP)
    ("PyTorch DDP, AMP", {}, {"precision": "amp_bf16", "framework": "pytorch"}, lambda d: 20 if d > 1 else 16),
    ("PyTorch FSDP2, fp32 params", {"zero": 3}, {"precision": "amp_bf16", "framework": "pytorch"}, lambda d: 16 / d),
    ("pure bf16", {}, {"precision": "pure_bf16", "framework": "pytorch"}, lambda d: 8),
    # ZeRO paper convention (Rajbhandari et al. 2020, Fig. 1): 2 + 2 + 12, sharded by stage
    ("ZeRO-1", {"zero": 1}, {}, lambda d: 4 + 12 / d),
    ("ZeRO-2", {"zero": 2}, {}, lambda d: 2 + 14 / d),
    ("ZeRO-3", {"zero": 3}, {}, lambda d: 16 / d),
]


@pytest.mark.parametrize(("name", "parallel", "training", "expected"), ROWS, ids=[r[0] for r in ROWS])
@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_sharding_table_bytes_per_param(name, parallel, training, expected, d):
    rb = recipe_bytes(ParallelPlan(**parallel), TrainingConfig(**training))
    assert rb.per_param(d) == expected(d)


@pytest.mark.parametrize(("name", "parallel", "training", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_estimate_memory_states_follow_the_table(name, parallel, training, expected):
    """Through the whole pipeline: 8 GPUs, tp 2, dp 4 -> d = 4; states / local params = table value."""
    model = load_model_preset("llama3-8b")
    rp = resolve_plan(model, {"tp": 2, **parallel}, {"seq_len": 1024, "global_batch": 8, **training}, 8)
    stage = estimate_memory(rp).stages[0]
    states = sum(stage.bucket(b) for b in ("weights", "gradients", "main_params", "optimizer"))
    states += sum(i.bytes for i in stage.items if i.name == "ddp.gradient_buckets")
    sp = stage_params(rp, 0)
    assert states / (sp.dense + sp.expert) == pytest.approx(expected(4), rel=1e-12)


def test_megatron_recipe_is_2_4_4_8():
    rb = recipe_bytes(ParallelPlan(), TrainingConfig())
    assert (rb.param, rb.grad, rb.main, rb.moments) == (2, 4, 4, 8)
    fp8 = recipe_bytes(ParallelPlan(), TrainingConfig(precision="fp8"))
    assert fp8.per_param(1) == 17


def test_expert_states_shard_over_expert_dp():
    model = load_model_preset("mixtral-8x7b")
    rp = resolve_plan(model, {"ep": 8, "distributed_optimizer": True}, {"seq_len": 1024, "global_batch": 16}, 16)
    assert rp.edp == 2 and rp.dense_shard_degree == 16
    stage = estimate_memory(rp).stages[0]
    items = {i.name: i.bytes for i in stage.items}
    sp = stage_params(rp, 0)
    assert items["optimizer.expert"] == pytest.approx(sp.expert * 8 / 2)
    assert items["optimizer.dense"] == pytest.approx(sp.dense * 8 / 16)


SHARDED = [{"zero": 1}, {"zero": 2}, {"zero": 3}, {"distributed_optimizer": True},
           {"distributed_optimizer": True, "megatron_fsdp": "optim_grads_params"}]


def _states(model, parallel, world, precision="bf16"):
    rp = resolve_plan(model, parallel, {"seq_len": 512, "global_batch": 64, "precision": precision}, world)
    s = estimate_memory(rp).stages[0]
    return sum(s.bucket(b) for b in ("weights", "gradients", "main_params", "optimizer"))


@settings(max_examples=30, deadline=None)
@given(sharding=st.sampled_from(SHARDED), dp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4]))
def test_memory_non_increasing_in_dp(sharding, dp, tp):
    model = load_model_preset("llama3-8b")
    assert _states(model, {"tp": tp, **sharding}, tp * 2 * dp) <= _states(model, {"tp": tp, **sharding}, tp * dp)


@settings(max_examples=30, deadline=None)
@given(zero=st.sampled_from([1, 2, 3]), d=st.sampled_from([2, 4, 8, 16]),
       precision=st.sampled_from(["bf16", "amp_bf16", "pure_bf16"]))
def test_sharded_states_sum_to_unsharded(zero, d, precision):
    """d ranks of a ZeRO-3 shard group together hold exactly the ZeRO-0 states of one rank (each stage's sharded
    states times d plus its replicated states equal the unsharded total)."""
    model = load_model_preset("llama3-8b")
    full = _states(model, {"zero": 0, "dp": 1}, 1, precision) if precision != "bf16" else None
    rb0 = recipe_bytes(ParallelPlan(zero=0), TrainingConfig(precision=precision, framework="pytorch"))
    rb = recipe_bytes(ParallelPlan(zero=zero), TrainingConfig(precision=precision, framework="pytorch"))
    n = stage_params(resolve_plan(model, {}, {"seq_len": 512, "global_batch": 64}, 1), 0).dense
    sharded = (rb.param / (d if zero >= 3 else 1) + rb.grad / (d if zero >= 2 else 1)
               + (rb.main + rb.moments) / d) * n
    replicated_parts = (rb.param if zero < 3 else 0) + (rb.grad if zero < 2 else 0)
    assert d * sharded - (d - 1) * replicated_parts * n == pytest.approx(rb0.per_param(1) * n)  # no DDP bucket at d=1
    if full is not None:
        assert full == pytest.approx(rb0.per_param(1) * n)


@settings(max_examples=20, deadline=None)
@given(pp=st.sampled_from([1, 2, 4, 8]), name=st.sampled_from(["llama3-8b", "mixtral-8x7b", "gpt-oss-120b"]))
def test_stage_params_sum_to_model_params(pp, name):
    from simulator.model import param_counts
    model = load_model_preset(name)
    if model.layers % pp:
        return
    rp = resolve_plan(model, {"pp": pp}, {"seq_len": 512, "global_batch": 64, "framework": "pytorch"}, pp)
    total = sum(stage_params(rp, s).dense + stage_params(rp, s).expert for s in range(pp))
    assert total == param_counts(model)["total"]


def _gpt36(global_batch: int, set_to_none: bool = True) -> dict:
    """The 3.6B GPT of issue 11 (16 layers, h 4096, s 4096, AMP, AdamW, one H200)."""
    return {"system": {"profile": "h200_x2", "nodes": 1, "gpus": 1},
            "model": {"name": "gpt-3.6b", "layers": 16, "hidden": 4096, "heads": 32, "ffn_hidden": 16384,
                      "vocab": 50304, "activation": "gelu", "norm": "layernorm", "linear_bias": True,
                      "position_embedding": "learned", "max_position": 4096, "tied_embeddings": False},
            "parallel": {"dp": 1},
            "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": global_batch, "precision": "amp_bf16",
                         "framework": "pytorch", "optimizer": "adam", "grad_set_to_none": set_to_none}}


def test_pytorch_gradients_live_across_accumulation_and_without_set_to_none():
    """Issue 11, measured on one H200: with two micro-batches the step peaks at 72.3 GiB (the first one's fp32
    gradients live while the second builds its activations); the model gave 59.0 GiB for both, which is right
    for one micro-batch (gradients replace activations during backward). zero_grad(set_to_none=False) keeps the
    gradients alive between steps: the same peak as accumulation."""
    from simulator import load_scenario, simulate

    peak = {k: simulate(load_scenario(_gpt36(*k))).memory.peak_bytes / GiB for k in ((1, True), (2, True), (1, False))}
    assert peak[(2, True)] == pytest.approx(72.3, rel=0.02)
    assert peak[(1, False)] == peak[(2, True)]
    assert peak[(1, True)] == pytest.approx(59.0, rel=0.02)
    # the difference is exactly the smaller of activations and gradients (4 B/param fp32 gradients here)
    params_GiB = 3.6e9 * 4 / GiB
    assert peak[(2, True)] - peak[(1, True)] == pytest.approx(params_GiB, rel=0.1)
