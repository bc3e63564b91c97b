"""The KV cache's default element type is the activation dtype (docs/interface.md), not the weight format."""

import pytest

from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.recipe import resolve_recipe


@pytest.mark.parametrize(("precision", "weight_bytes"), [("fp8", 1.0), ("fp4", 4.5 / 8)])
def test_quantized_weights_keep_a_bf16_cache(precision, weight_bytes):
    infer = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=1, mode="inference", precision=precision)
    recipe = resolve_recipe(ParallelPlan(), infer)
    assert recipe.serve_param == pytest.approx(weight_bytes)     # fp8: 1 B; NVFP4: 4 bits + an fp8 scale per 16
    assert recipe.kv_cache == recipe.activation == 2.0           # bf16 activations, so a bf16 cache
    fp8 = resolve_recipe(ParallelPlan(), infer.model_copy(update={"kv_cache_dtype": "fp8"}))
    assert fp8.kv_cache == 1.0
