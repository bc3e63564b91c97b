"""Plan rules added with the step-time engine (the schedule relies on them)."""

import pytest

from simulator.errors import UserError
from simulator.model import load_model_preset
from simulator.plan import resolve_plan


def test_interleaved_schedule_needs_microbatches_multiple_of_pp():
    with pytest.raises(UserError) as exc:
        resolve_plan(load_model_preset("gpt3-175b"), {"tp": 8, "pp": 8, "vpp": 2},
                     {"global_batch": 12, "micro_batch": 1}, 64)
    assert exc.value.key_path == "training.global_batch"
    assert "interleaved schedule (vpp 2) needs the micro-batch count" in exc.value.message
    assert "= 12 to be a multiple of pp (8)" in exc.value.message


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8", "amp_bf16", "pure_bf16", "fp32"])
@pytest.mark.parametrize("framework", ["megatron", "pytorch"])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_gradient_bytes_on_the_wire_match_the_gradients_held(precision, framework, zero):
    """DP traffic reduces the gradients the memory model holds; Megatron fp16 is the one exception: fp32 main
    grads held, reduced in fp16 (sharding_and_comm.md: G = 2N with fp16)."""
    rp = resolve_plan(load_model_preset("llama3-8b"), {"zero": zero}, {"precision": precision,
                                                                       "framework": framework, "global_batch": 8}, 8)
    held = rp.recipe.grad
    expected = 2 if (precision == "fp16" and framework == "megatron" and zero == 0) else held
    assert rp.recipe.grad_wire == expected
