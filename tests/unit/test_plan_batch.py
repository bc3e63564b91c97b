"""The plan apart from the batch (issue 26): ``Batch``, ``ResolvedPlan.shape_of(batch)`` and the values a plan
implies with one home in simulator/plan/ (the GEMM dtype on a GPU, the serving degrees rule, dp), read alike by
training, serving and multimodal."""

import pytest

from simulator.entries.serve import simulate_serving
from simulator.errors import UserError
from simulator.hardware import load_node
from simulator.model import load_model_preset
from simulator.multimodal.evaluate import extra_state_bytes
from simulator.plan import Batch, ParallelPlan, resolve_plan
from simulator.plan.rules import check_serving_degrees, data_parallel
from simulator.plan.shape import heads_per_rank, rank_shape
from simulator.scenario import load_scenario

A100 = load_node("dgx_a100_80gb").gpu
H100 = load_node("dgx_h100").gpu
B200 = load_node("hgx_b200").gpu


def _plan(parallel=None, training=None, world=8, preset="llama3-8b"):
    return resolve_plan(load_model_preset(preset), parallel or {}, training or {}, world)


def test_the_training_micro_batch_is_a_batch():
    rp = _plan({"tp": 2}, {"micro_batch": 2, "seq_len": 4096, "global_batch": 16})
    assert rp.batch == Batch(2, 4096) and rp.batch.tokens == 8192 and rp.batch.context == 4096
    assert rp.shape is rp.shape_of(Batch(2, 4096))          # the training shape is the shape of its batch
    assert rp.shape == rank_shape(rp.model, 4096, 2, tp=2)


def test_shape_of_a_serving_step_is_cached_by_the_batch():
    """A decode step of 64 sequences on Llama-3-8B at TP 2: 64 tokens per rank, 16 query and 4 K/V heads per rank;
    cached tokens are attended to, not projected, so they leave the shape alone."""
    rp = _plan({"tp": 2}, {"global_batch": 4})
    step = rp.shape_of(Batch(64, 1, 2047))
    assert rp.shape_of(Batch(64, 1, 2047)) is step
    assert (step.tokens, step.heads_tp, step.kv_heads_tp, step.kv_ranks) == (64, 16, 4, 2)
    assert rp.shape_of(Batch(64, 1, 0)) == step and rp.shape.tokens == 2048


@pytest.mark.parametrize("fields", [(0, 1, 0), (1, 0, 0), (1, 1, -1)])
def test_an_empty_batch_is_refused(fields):
    with pytest.raises(ValueError, match="a batch needs"):
        Batch(*fields)


def test_kv_heads_replicate_beyond_tp():
    """Llama-3-70B, 8 K/V heads: at TP 16 each is held by 2 ranks (K/V projections split over 8 ranks)."""
    rp = _plan({"tp": 16}, {"global_batch": 1}, world=16, preset="llama3-70b")
    assert (rp.kv_heads_tp, rp.shape.kv_ranks, rp.shape.heads_tp) == (1, 8, 4)
    assert heads_per_rank(64, 8, 2) == 4


@pytest.mark.parametrize(("precision", "fp8_recipe", "gpu", "dtype"), [
    ("fp8", "tensorwise", A100, "bf16"),    # no fp8 tensor cores on Ampere
    ("fp8", "tensorwise", H100, "fp8"),
    ("fp8", "blockwise", H100, "fp8_block"),
    ("fp4", "tensorwise", H100, "bf16"),    # NVFP4 needs Blackwell's fp4 tensor cores
    ("fp4", "tensorwise", B200, "fp4"),
    ("bf16", "tensorwise", A100, "bf16"),
])
def test_gemm_dtype_on_a_gpu(precision, fp8_recipe, gpu, dtype):
    rp = _plan({}, {"precision": precision, "fp8_recipe": fp8_recipe, "global_batch": 8})
    assert rp.gemm_dtype(gpu) == dtype


def _serve(precision: str):
    return simulate_serving(load_scenario({
        "system": {"profile": "dgx_a100_80gb", "gpus": 1}, "model": {"preset": "llama3-8b"},
        "training": {"mode": "inference", "precision": precision},
        "serving": {"batch": 32, "input_len": 1024, "output_len": 1}}))


def test_serving_gemms_fall_back_to_bf16_where_training_does():
    """An fp8 recipe on an A100 (no fp8 tensor cores): serving computes its GEMMs in bf16, as training does (before
    issue 26 serving priced them as fp8 GEMMs: 1-byte operands, the fp8 efficiency table), but reads the fp8
    checkpoint's 1-byte weights (weight-only FP8 Marlin, vllm-project/vllm#5975; issue 26 drift fix): the
    compute-bound prefill GEMMs equal bf16's, the weight-bound decode GEMMs are faster; the K/V cache is the activation
    dtype (bf16) in both (docs/interface.md kv_cache_dtype), so decode attention is the same."""
    fp8, bf16 = _serve("fp8"), _serve("bf16")
    assert fp8.prefill.breakdown_s["gemm"] == pytest.approx(bf16.prefill.breakdown_s["gemm"], rel=1e-12)
    assert fp8.decode.breakdown_s["gemm"] < 0.8 * bf16.decode.breakdown_s["gemm"]
    assert fp8.decode.breakdown_s["attention"] == pytest.approx(bf16.decode.breakdown_s["attention"], rel=1e-12)


@pytest.mark.parametrize("key", ["cp", "ulysses"])
def test_serving_degrees_rule_lives_in_the_plan(key):
    with pytest.raises(UserError, match=f"{key} must be 1, got 2") as err:
        check_serving_degrees(ParallelPlan(**{key: 2}))
    assert err.value.key_path == f"parallel.{key}"
    check_serving_degrees(ParallelPlan(tp=8, pp=2, ep=4))


def test_data_parallel_from_a_gpu_count():
    assert data_parallel(64, tp=8, pp=2) == 4
    assert data_parallel(64, tp=4, pp=2, cp=2, ulysses=2) == 2
    assert data_parallel(48, tp=8, pp=4) is None


def test_extra_parameters_are_held_as_the_recipe_says():
    """1 M extra parameters at TP 2 under Megatron mixed precision with the distributed optimizer over dp 4: per
    parameter 2 B weights + 4 B fp32 grads + (4 B main + 8 B Adam moments) / 4 = 9 B, halved by TP."""
    rp = _plan({"tp": 2, "distributed_optimizer": True}, {"global_batch": 8})
    assert rp.dp == 4 and rp.recipe.stage == 1
    assert extra_state_bytes(rp, 1e6) == pytest.approx(1e6 / 2 * (2 + 4 + (4 + 8) / 4), rel=1e-12)
