"""Low-precision optimizer states (issue 28 item 3): Adam moments stored in bf16 / fp8 (Megatron
--use-precision-aware-optimizer --exp-avg-dtype --exp-avg-sq-dtype) and the master copy's 16-bit remainders
(Megatron store_param_remainders), checked by hand on a 4-layer GPT."""

import pytest

from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.model import ModelSpec
from simulator.plan import ParallelPlan, TrainingConfig, resolve_plan, resolve_recipe

GPT = ModelSpec(layers=4, hidden=1024, heads=16, vocab=50304)
N = 4 * (12 * 1024 * 1024 + 4 * 1024) + 2 * 50304 * 1024 + 2 * 1024   # 153,372,672 (test_memory_lifetimes.py)


def _states(parallel=None, **training):
    rp = resolve_plan(GPT, {"dp": 8, "distributed_optimizer": True} | (parallel or {}),
                      {"seq_len": 1024, "global_batch": 8} | training, 8)
    st = estimate_memory(rp).stages[0]
    return {b: st.bucket(b) for b in ("weights", "gradients", "main_params", "optimizer")}


def test_bf16_moments_halve_the_optimizer_states():
    """Megatron bf16 with the distributed optimizer over 8 ranks: weights 2 B, fp32 main grads 4 B, fp32 master
    4/8 B and moments 8/8 B per parameter (18 B unsharded); bf16 moments: 2 x 2 B / 8 = 0.5 B per parameter, so
    the optimizer bucket is 153,372,672 x 0.5 = 76,686,336 B instead of 153,372,672 B."""
    base = _states()
    assert base == {"weights": 2 * N, "gradients": 4 * N, "main_params": 4 * N / 8, "optimizer": 8 * N / 8}
    low = _states(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    assert low["optimizer"] == 4 * N / 8 == 76_686_336
    assert {k: v for k, v in low.items() if k != "optimizer"} == {k: v for k, v in base.items() if k != "optimizer"}


def test_mixed_moment_dtypes_and_fp8():
    """One key at a time: the other moment keeps the recipe's fp32. fp8 first moment + fp32 second: 1 + 4 = 5 B;
    bf16 first + fp8 second: 2 + 1 = 3 B (unsharded, ZeRO-0)."""
    rb = resolve_recipe(ParallelPlan(), TrainingConfig(exp_avg_dtype="fp8"))
    assert rb.moments == 5
    assert resolve_recipe(ParallelPlan(), TrainingConfig(exp_avg_dtype="bf16", exp_avg_sq_dtype="fp8")).moments == 3
    assert resolve_recipe(ParallelPlan(), TrainingConfig()).moments == 8


def test_param_remainders_halve_the_master_copy():
    """store_param_remainders: the master copy is int16 low halves beside the bf16 weights (2 B per parameter):
    main params 2 x 153,372,672 / 8 = 38,343,168 B; bf16 moments 76,686,336 B. Per parameter: 2 + 4 + (2 + 4)/8
    = 6.75 B against 2 + 4 + (4 + 8)/8 = 7.5 B."""
    st = _states(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16", store_param_remainders=True)
    assert st["main_params"] == 2 * N / 8 == 38_343_168
    assert sum(st.values()) == 6.75 * N
    assert sum(_states().values()) == 7.5 * N


def test_optimizer_step_streams_the_smaller_moments():
    """The optimizer step's HBM bytes read and write each moment: bf16 moments move 2 x (2 + 2) = 8 B less per
    parameter than fp32 ones (recipe.optimizer_update_bytes)."""
    fp32 = resolve_recipe(ParallelPlan(), TrainingConfig()).optimizer_update_bytes
    bf16 = resolve_recipe(ParallelPlan(), TrainingConfig(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"))
    assert fp32 - bf16.optimizer_update_bytes == 8


@pytest.mark.parametrize("training, key", [
    ({"exp_avg_dtype": "bf16", "optimizer": "sgd"}, "exp_avg_dtype"),
    ({"exp_avg_sq_dtype": "bf16", "optimizer": "adafactor"}, "exp_avg_sq_dtype"),
    ({"store_param_remainders": True}, "store_param_remainders"),
    ({"store_param_remainders": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16", "precision": "fp16"},
     "store_param_remainders"),
    ({"store_param_remainders": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16",
      "framework": "pytorch"}, "store_param_remainders"),
])
def test_combinations_that_do_not_exist_are_refused(training, key):
    with pytest.raises(UserError, match=key):
        resolve_plan(GPT, {}, {"global_batch": 8} | training, 8)
