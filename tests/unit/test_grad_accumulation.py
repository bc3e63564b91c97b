"""training.grad_accumulation: a separate fp32 gradient-accumulation pass per micro-batch (DeepSpeed
BF16_Optimizer.update_hp_grads) against Megatron's accumulation fused into the weight-gradient GEMM."""

import pytest

from simulator.compute.efficiency import default_efficiency
from simulator.errors import UserError
from simulator.hardware.loader import load_gpu
from simulator.model import load_model_preset
from simulator.plan import ParallelPlan, TrainingConfig, resolve_plan, resolve_recipe
from simulator.plan.recipe import SEPARATE_FP32_ACCUMULATION_BYTES
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import layer_time


def test_separate_fp32_pass_moves_18_bytes_per_parameter():
    """cast: read bf16 2 + write fp32 4; add_: read 4 + read 4 + write 4 = 18 B (deepspeed/runtime/bf16_optimizer.py
    ``hp_grad.add_(lp.grad.to(fp32))``); fused accumulation moves nothing outside the GEMM."""
    assert SEPARATE_FP32_ACCUMULATION_BYTES == 18
    assert resolve_recipe(ParallelPlan(), TrainingConfig(grad_accumulation="separate_fp32")).grad_accum_bytes == 18
    assert resolve_recipe(ParallelPlan(), TrainingConfig()).grad_accum_bytes == 0


def test_llama3_8b_layer_backward_grows_by_one_pass_over_its_tp2_share():
    """Llama-3-8B layer at TP 2: q/o 4096 x 4096, k/v 4096 x 1024, gate/up/down 4096 x 14336 split over 2 ranks,
    two RMSNorm weights (4096 each) replicated: 109,060,096 parameters; the pass reads/writes 18 B of each at the
    streaming rate (3352 GB/s x memory_efficiency) plus one kernel's launch."""
    model = load_model_preset("llama3-8b")
    gpu, eff = load_gpu("h100_sxm5"), default_efficiency("hopper")
    sh = rank_shape(model, tp=2, seq_len=8192, micro_batch=1, sp=True)
    fused = layer_time(model, sh, gpu, eff, "bf16", layer_index=0)
    separate = layer_time(model, sh, gpu, eff, "bf16", layer_index=0, grad_accum_bytes=18)
    params = (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) / 2 + 2 * 4096
    assert params == 109_060_096
    expected = 18 * params / (3352e9 * eff.memory_efficiency) + eff.launch_s
    assert separate.bwd_s - fused.bwd_s == pytest.approx(expected, rel=1e-12)
    assert separate.fwd_s == fused.fwd_s


@pytest.mark.parametrize("training", [
    {"grad_accumulation": "separate_fp32", "framework": "pytorch"},
    {"grad_accumulation": "separate_fp32", "precision": "pure_bf16"},
])
def test_separate_fp32_outside_megatron_mixed_precision_is_refused(training):
    with pytest.raises(UserError, match="grad_accumulation"):
        resolve_plan(load_model_preset("llama3-8b"), {}, training, 8)


def test_mtp_last_stage_accumulates_its_embedding_copy_too():
    """With MTP modules and untied embeddings the pipelined last stage still holds the word embedding (the MTP
    modules embed the next tokens there): a separate fp32 accumulation pass also covers that copy, v x h / tp
    parameters x 18 B more per micro-batch than without MTP's copy (hand check against head_time)."""
    from simulator.compute import default_efficiency
    from simulator.hardware import load_cluster
    from simulator.model import load_model_preset
    from simulator.plan.shape import rank_shape
    from simulator.pricing.compute import head_time

    model = load_model_preset("deepseek-v3")
    assert model.mtp_layers > 0 and not model.tied_embeddings
    gpu = load_cluster("dgx_h100", nodes=1).node.gpu
    eff = default_efficiency(gpu.architecture)
    sh = rank_shape(model, 4096, 1, tp=2, sp=True)
    plain = head_time(model, sh, gpu, eff, "bf16", 18.0, embedding_copy=False)
    with_copy = head_time(model, sh, gpu, eff, "bf16", 18.0, embedding_copy=True)
    extra_bytes = model.vocab * model.hidden / 2 * 18
    assert with_copy.bwd_s - plain.bwd_s == pytest.approx(
        extra_bytes / (gpu.memory.bandwidth * eff.memory_efficiency), rel=1e-6)
