"""The plan's resolved precision recipe and per-rank shapes: one table, read alike by memory, traffic and time."""

import pathlib
import re

import pytest

from simulator.compute import default_efficiency
from simulator.compute.optimizer import optimizer_bytes
from simulator.hardware.loader import load_gpu
from simulator.model import load_model_preset
from simulator.plan import ParallelPlan, TrainingConfig, resolve_plan, resolve_recipe
from simulator.plan.shape import rank_shape
from simulator.pricing.compute import layer_time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_precision_table_lives_in_one_module():
    """No module but simulator/plan/recipe.py keys a table by precision names (the drift issue 12 found)."""
    pattern = re.compile(r'["\']amp_bf16["\']\s*:')
    owners = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "simulator").rglob("*.py")
                    if pattern.search(p.read_text()))
    assert owners == ["simulator/plan/recipe.py"]


@pytest.mark.parametrize("optimizer", ["adam", "sgd", "adafactor"])
@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8", "amp_bf16", "pure_bf16", "fp32"])
def test_optimizer_step_moves_the_moments_memory_holds(optimizer, precision):
    """Optimizer time reads and writes every moment memory keeps: SGD's momentum included (was 0 in time, 1 in
    memory)."""
    r = resolve_recipe(ParallelPlan(), TrainingConfig(precision=precision, optimizer=optimizer))
    no_moments = resolve_recipe(ParallelPlan(), TrainingConfig(precision=precision, optimizer="adafactor"))
    assert r.optimizer_update_bytes - no_moments.optimizer_update_bytes == 2 * r.moments
    assert r.moments == {"adam": 2, "sgd": 1, "adafactor": 0}[optimizer] * (2 if precision == "pure_bf16" else 4)


def test_optimizer_reads_the_gradients_memory_holds():
    """ZeRO / PyTorch keep 16-bit gradients with 16-bit params: the optimizer reads 2 B (was 4), Megatron 4 B.
    Megatron bf16 Adam: grad 4 + master 8 + bf16 copy 2 + moments 16 + norm read 4 = 34 B per owned param."""
    megatron = resolve_recipe(ParallelPlan(), TrainingConfig())
    zero = resolve_recipe(ParallelPlan(zero=1), TrainingConfig())
    assert megatron.optimizer_update_bytes == 34 and megatron.grad == 4
    assert zero.optimizer_update_bytes == 30 and zero.grad == 2
    assert optimizer_bytes(10.0, 80.0, zero.optimizer_update_bytes, zero.grad) == 10 * 30 + 80 * 2


def test_fp8_primary_weights_are_gathered_as_held():
    """fp8 primary weights (1 B) are what memory holds and what the distributed optimizer all-gathers."""
    r = resolve_recipe(ParallelPlan(distributed_optimizer=True), TrainingConfig(precision="fp8"))
    assert (r.param, r.param_wire, r.gemm_dtype, r.activation, r.moe_dispatch_dtype) == (1, 1, "fp8", 2, "fp8")
    assert r.gemm_dtype_on(("bf16", "fp16")) == "bf16"


def test_amp_fsdp_gathers_in_the_compute_dtype():
    assert resolve_recipe(ParallelPlan(zero=3), TrainingConfig(precision="amp_bf16", framework="pytorch")
                          ).param_wire == 2
    assert resolve_recipe(ParallelPlan(zero=1), TrainingConfig(precision="amp_bf16", framework="pytorch")
                          ).param_wire == 4


def test_plan_resolves_recipe_and_shape_once():
    rp = resolve_plan(load_model_preset("llama3-70b"), {"tp": 8, "sp": True, "cp": 2},
                      {"seq_len": 8192, "global_batch": 16}, 64)
    assert rp.recipe is rp.recipe and rp.shape is rp.shape
    sh = rp.shape
    # 8192 tokens / cp 2 = 4096 per rank, 512 in the SP region; 64 heads / 8 = 8; 8 K/V heads / 8 = 1
    assert (sh.tokens, sh.norm_tokens, sh.heads, sh.kv_heads, sh.ffn) == (4096, 512, 8, 1, 28672 / 8)


def test_kv_heads_replicate_over_tp_and_ulysses():
    m = load_model_preset("llama3-8b")           # 32 heads, 8 K/V heads
    assert rank_shape(m, 1024, 1, tp=16).kv_heads_tp == 1            # 8 K/V heads over 16 ranks: replicated
    sh = rank_shape(m, 1024, 1, tp=8, ulysses=4)                      # 1 K/V head per TP rank, 4 Ulysses ranks
    assert (sh.heads, sh.kv_heads, sh.tokens) == (1, 1, 256)


def test_moe_shape_rows_per_expert():
    m = load_model_preset("mixtral-8x7b")        # 8 experts, top-2
    sh = rank_shape(m, 4096, 1, tp=2, sp=True, ep=4)
    assert sh.norm_tokens == 2048 and sh.routed_rows == 2048 * 2 and sh.rows_per_expert == 2048 * 2 / 2


def test_bf16_gradient_reduction_halves_the_buffer_and_the_wire():
    """Megatron --grad-reduce-in-bf16 (NeMo grad_sync_dtype: bf16, as every NVIDIA MLPerf GPT-3 / Llama 3.1 run):
    the main-gradient buffer and the reduce-scatter hold 2 B per parameter instead of 4; Adam's step then moves
    grad 2 + master 8 + fp8 copy 1 + moments 16 + norm read 2 = 29 B per owned parameter (34 - 5 with fp32 grads)."""
    default = resolve_recipe(ParallelPlan(distributed_optimizer=True), TrainingConfig(precision="fp8"))
    bf16 = resolve_recipe(ParallelPlan(distributed_optimizer=True),
                          TrainingConfig(precision="fp8", grad_reduce_dtype="bf16"))
    assert (default.grad, default.grad_wire) == (4, 4)
    assert (bf16.grad, bf16.grad_wire, bf16.optimizer_update_bytes) == (2, 2, 29)
    assert default.optimizer_update_bytes == 33


@pytest.mark.parametrize("parallel, training", [
    ({"zero": 1}, {"grad_reduce_dtype": "bf16"}),
    ({}, {"grad_reduce_dtype": "bf16", "framework": "pytorch"}),
    ({}, {"grad_reduce_dtype": "fp32", "precision": "pure_bf16"}),
])
def test_grad_reduce_dtype_outside_megatron_mixed_precision_is_refused(parallel, training):
    from simulator.errors import UserError
    with pytest.raises(UserError, match="grad_reduce_dtype"):
        resolve_plan(load_model_preset("llama3-8b"), parallel, training, 8)


@pytest.mark.parametrize("precision,zero,copies,amp", [
    ("amp_bf16", 3, (4.0, 10.0), False),   # bf16 gathers (w 2), fp32 reduce (g 4): (2w, 3w + g)
    ("pure_bf16", 3, (4.0, 8.0), False),   # bf16 everything: (4, 6 + 2)
    ("amp_bf16", 2, (0.0, 0.0), True),     # ZeRO-2: no parameter gathers; autocast over fp32 weights
    ("amp_bf16", 0, (0.0, 0.0), True),     # DDP + autocast
])
def test_fsdp2_copies_and_bf16_compute(precision, zero, copies, amp):
    """FSDP2 (pytorch + ZeRO-3) copies each parameter out of the all-gather buffer after the forward gather and the
    backward re-gather (read + write w bytes each) and copies the compute-dtype gradient into the reduce-scatter
    buffer in the reduce dtype (read w, write g): (2w, 3w + g) bytes per parameter per micro-batch. Its
    mixed-precision policy computes in bf16: no autocast terms (fp32 residual stream, per-forward weight casts)."""
    r = resolve_recipe(ParallelPlan(dp=8, zero=zero), TrainingConfig(precision=precision, framework="pytorch"))
    assert r.fsdp_copy_bytes == copies and r.amp_casts is amp
    assert resolve_recipe(ParallelPlan(dp=8, zero=3), TrainingConfig(precision=precision)).fsdp_copy_bytes == (0, 0)


def test_fsdp2_copies_in_a_llama_layer_time():
    """One Llama-3-8B layer at TP 1: 218,112,000 parameters x (4, 10) bytes, at the H200's modelled streaming rate
    (4.8 TB/s x 0.803), are the whole difference between the same layer with and without the copies."""
    model = load_model_preset("llama3-8b")
    sh = rank_shape(model, seq_len=8192, micro_batch=1)
    gpu, eff = load_gpu("h200_sxm"), default_efficiency("hopper")
    plain = layer_time(model, sh, gpu, eff, "bf16", layer_index=0, eager=True)
    fsdp = layer_time(model, sh, gpu, eff, "bf16", layer_index=0, eager=True, fsdp_copy_bytes=(4.0, 10.0))
    rate = gpu.memory.bandwidth * eff.memory_efficiency
    assert fsdp.fwd_s - plain.fwd_s == pytest.approx(4 * 218_112_000 / rate + eff.launch_s, rel=1e-9)
    assert fsdp.bwd_s - plain.bwd_s == pytest.approx(10 * 218_112_000 / rate + eff.launch_s, rel=1e-9)
