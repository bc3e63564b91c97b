"""training.attention_kernel: the FlashAttention-2 package on Hopper runs at its own published rate."""

import pytest

from simulator.compute.efficiency import default_efficiency
from simulator.compute.gemm import peak_flops
from simulator.errors import UserError
from simulator.hardware.loader import load_gpu
from simulator.model import load_model_preset
from simulator.plan import ParallelPlan, TrainingConfig, resolve_plan, resolve_recipe
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import layer_time


def test_recipe_names_the_kernel_compute_times():
    assert resolve_recipe(ParallelPlan(), TrainingConfig()).attention == "flash"
    assert resolve_recipe(ParallelPlan(), TrainingConfig(attention_kernel="flash2")).attention == "flash2"


def test_flash2_on_h100_runs_the_core_attention_at_measured_flash2_rate():
    """Llama-3-8B at TP 2, 8K tokens: 16 query heads of 128 per rank; causal Q K^T and P V forward = 2 GEMMs x
    2 x (s^2 / 2) x 128 x 16 = 2.749e11 FLOPs; at FlashAttention-2's measured H200 rate (0.272 x 989) plus one launch."""
    model = load_model_preset("llama3-8b")
    gpu, eff = load_gpu("h100_sxm5"), default_efficiency("hopper")
    sh = rank_shape(model, tp=2, seq_len=8192, micro_batch=1, sp=True)
    fa2 = layer_time(model, sh, gpu, eff, "bf16", layer_index=0, attention="flash2")
    fused = layer_time(model, sh, gpu, eff, "bf16", layer_index=0, attention="flash")
    flops = 2 * 2 * 8192**2 / 2 * 128 * 16
    assert fa2.attn_fwd_flops == pytest.approx(flops, rel=1e-12)
    assert peak_flops(gpu, "bf16") == pytest.approx(989.4e12, rel=2e-3)
    assert fa2.attn_fwd_s == pytest.approx(flops / (peak_flops(gpu, "bf16") * 0.272) + eff.launch_s, rel=1e-12)
    assert (fa2.attn_fwd_s - eff.launch_s) / (fused.attn_fwd_s - eff.launch_s) == pytest.approx(0.55 / 0.272,
                                                                                                 rel=1e-12)
    assert fa2.fwd_s - fa2.attn_fwd_s == pytest.approx(fused.fwd_s - fused.attn_fwd_s, rel=1e-12)
    # backward: dQ, dK, dV and the in-kernel recomputation of Q K^T = 2.5x the forward FLOPs, as measured
    assert fa2.attn_bwd_s == pytest.approx(2.5 * flops / (peak_flops(gpu, "bf16") * 0.272) + eff.launch_s,
                                           rel=1e-12)


def test_ampere_has_no_separate_flash2_rate():
    """On Ampere FlashAttention-2 is the fused kernel the attention_efficiency already describes."""
    eff = default_efficiency("ampere")
    assert eff.attention_fraction("flash2", 2048, 128) == eff.attention_fraction("flash", 2048, 128)


@pytest.mark.parametrize("training", [{"attention_kernel": "flash2", "attention": "unfused"},
                                      {"attention_kernel": "flash2", "framework": "pytorch"}])
def test_flash2_outside_megatron_flash_attention_is_refused(training):
    with pytest.raises(UserError, match="attention_kernel"):
        resolve_plan(load_model_preset("llama3-8b"), {}, training, 8)
