"""The serving step's program (simulator/program/serving.py) and its pricing (simulator/pricing/serving.py): hand
numbers for a decode step's attention bytes, the LM head on the padded vocabulary, the router / head / weight
dtypes (issue 26 drift fixes), and training and serving pricing an identical forward op identically."""

from dataclasses import replace

import pytest

from simulator.compute.efficiency import default_efficiency
from simulator.compute.gemm import peak_flops
from simulator.plan import Batch
from simulator.pricing.compute import gemm_op_seconds, mem_op_seconds
from simulator.pricing.serving import cache_attention_seconds, price_serving
from simulator.program import (
    embedding_program,
    head_program,
    layer_program,
    serving_embedding_program,
    serving_head_program,
    serving_layer_program,
)
from simulator.scenario import load_scenario
from simulator.serving import backends as B

FWD = frozenset({"fwd"})


def _scenario(preset="llama3-8b", profile="hgx_h200", precision="bf16", parallel=None, gpus=None):
    system = {"profile": profile, "gpus": gpus} if gpus else {"profile": profile, "nodes": 1}
    return load_scenario({"system": system, "model": {"preset": preset}, "parallel": parallel or {},
                          "training": {"mode": "inference", "precision": precision},
                          "serving": {"batch": 1, "input_len": 1024, "output_len": 1}})


def _layer(sc, batch, layer_index=0, imbalance=1.0):
    rp, gpu, s = sc.plan, sc.cluster.node.gpu, sc.serving
    kv = (rp.model.mla.kv_lora_rank + rp.model.mla.qk_rope_head_dim) * rp.recipe.kv_cache if rp.model.mla \
        else 2 * rp.kv_heads_tp * rp.model.dhead * rp.recipe.kv_cache
    return serving_layer_program(rp, batch, rp.gemm_dtype(gpu), rp.weight_dtype(gpu), layer_index=layer_index,
                                 kv_token_bytes=kv, kernels=B.KERNEL_SETS[s.kernels],
                                 decode_kernel=B.ATTENTION_KERNELS["flash_decoding"],
                                 expert_kernel=B.EXPERT_KERNELS[s.expert_kernel], imbalance=imbalance)


def test_decode_attention_reads_the_cached_and_new_tokens():
    """Llama-3-8B, 4 sequences at 1024 cached tokens + 1 new: 4 x 1025 tokens x 8 K/V heads x 128 x (K, V) x 2 B =
    16.8 MB per layer, streamed at 0.94 x 4.8 TB/s (the split-KV decode kernel) plus one launch."""
    sc = _scenario(gpus=1)
    op = _layer(sc, Batch(sequences=4, new=1, cached=1024)).attention
    assert op.decode and op.kv_bytes == 4 * 1025 * 8 * 128 * 2 * 2 == 16_793_600
    assert op.flops == 2 * 4 * 1 * (1024 + 1) * (128 + 128) * 32   # causal: the new query over 1025 keys
    eff = default_efficiency("hopper")
    assert cache_attention_seconds(op, sc.cluster.node.gpu, eff) == pytest.approx(
        eff.launch_s + 16_793_600 / (0.94 * 4.8e12), rel=1e-12)


def test_prefill_attention_runs_the_forward_flash_curve():
    """A prefill chunk's attention: causal FLOPs at 0.383 x s / (s + 1612) of the bf16 peak (the forward fit, now
    ``sdpa_fwd`` in compute_efficiency.yaml beside training's attention rates)."""
    sc = _scenario(gpus=1)
    gpu, eff = sc.cluster.node.gpu, default_efficiency("hopper")
    op = _layer(sc, Batch(sequences=1, new=4096)).attention
    assert not op.decode and op.flops == 2 * 4096 * (4096 + 1) / 2 * 256 * 32
    rate = peak_flops(gpu, "bf16") * 0.383 * 4096 / (4096 + 1612)
    assert cache_attention_seconds(op, gpu, eff) == pytest.approx(eff.launch_s + op.flops / rate, rel=1e-12)


def test_lm_head_multiplies_the_padded_vocabulary():
    """Llama-3-70B under TP 8: Megatron-style padding to a multiple of 128 x 8 = 1024 makes 128256 -> 129024 rows
    (126 x 1024), as memory counts them; serving's head and training's output layer both multiply 16128 per rank."""
    sc = _scenario("llama3-70b", "dgx_h100", parallel={"tp": 8})
    rp = sc.plan
    assert rp.vocab_held == 129024 and rp.shape.vocab_tp == 16128
    head = serving_head_program(rp, Batch(sequences=8, new=1, cached=100), "bf16", "bf16").gemms[0]
    assert (head.m, head.k, head.n) == (8, 8192, 16128)
    train = head_program(rp.model, rp.shape, "bf16").gemms_in("fwd")[0]
    assert train.name == "output_layer" and train.n == 16128


def test_router_and_head_stay_bf16_under_fp8():
    """DeepSeek-V3 fp8 on H200: the linear layers and experts run fp8, the MoE router and the LM head bf16 (vLLM
    builds the gate as an unquantized GateLinear and its fp8 method quantizes LinearBase layers, not the
    ParallelLMHead), exactly as training's program."""
    sc = _scenario("deepseek-v3", precision="fp8", parallel={"ep": 8})
    rp, batch = sc.plan, Batch(sequences=64, new=1, cached=2000)
    moe_layer = rp.model.layers - 1
    dtypes = {g.name: g.dtype for g in _layer(sc, batch, moe_layer).gemms}
    assert dtypes["router"] == "bf16"
    assert {d for n, d in dtypes.items() if n != "router"} == {"fp8"}
    assert serving_head_program(rp, batch, "fp8", "fp8").gemms[0].dtype == "bf16"
    train = layer_program(rp.model, rp.shape_of(batch), "fp8", layer_index=moe_layer, phases=FWD)
    assert {g.name: g.dtype for g in train.gemms}["router"] == "bf16"


def test_weight_only_fp8_on_an_a100_reads_one_byte_weights():
    """An fp8 checkpoint on an A100 (no fp8 tensor cores): GEMMs compute bf16 but read 1-byte weights (vLLM's FP8
    Marlin, vllm-project/vllm#5975); the LM head's weights stay bf16. Decode at batch 1: the fused q/k/v GEMM moves
    2 x (4096 + 6144) + 1 x 4096 x 6144 B (25.2 MB: 17.4 us at 0.71 x 2.04 TB/s), against 50.4 MB in bf16
    (37.5 us); the GEMM model's small-m compute time (one 64-row tile, 21.4 us) now binds it."""
    sc = _scenario(profile="dgx_a100_80gb", precision="fp8", gpus=1)
    rp, gpu, eff = sc.plan, sc.cluster.node.gpu, default_efficiency("ampere")
    batch = Batch(sequences=1, new=1, cached=1023)
    qkv = next(g for g in _layer(sc, batch).gemms if g.name == "qkv_proj")
    assert (qkv.dtype, qkv.weight_dtype) == ("bf16", "fp8")
    bw = gpu.memory.bandwidth * eff.memory_efficiency
    weight_only = gemm_op_seconds([qkv], gpu, eff)[0]
    bf16 = gemm_op_seconds([replace(qkv, weight_dtype="")], gpu, eff)[0]
    assert bf16 == pytest.approx(eff.launch_s + 2 * (4096 + 6144 + 4096 * 6144) / bw, rel=1e-12)
    assert eff.launch_s + (2 * (4096 + 6144) + 4096 * 6144) / bw < weight_only < 0.7 * bf16
    head = serving_head_program(rp, batch, rp.gemm_dtype(gpu), rp.weight_dtype(gpu)).gemms[0]
    assert (head.dtype, head.weight_dtype) == ("bf16", "")


CASES = [("llama3-8b", "hgx_h200", "bf16", {"tp": 2}), ("llama3-70b", "dgx_h100", "fp8", {"tp": 8}),
         ("mixtral-8x7b", "hgx_h200", "bf16", {"ep": 4}), ("deepseek-v3", "hgx_h200", "fp8", {"ep": 8})]


@pytest.mark.parametrize(("preset", "profile", "precision", "parallel"), CASES)
@pytest.mark.parametrize("batch", [Batch(sequences=1, new=512), Batch(sequences=32, new=1, cached=4000)])
def test_training_and_serving_price_an_identical_forward_op_identically(preset, profile, precision, parallel, batch):
    """Every GEMM a serving layer shares with training's forward program of the same rank shape (all but the fused
    q/k/v and the touched experts) is the same op and costs the same seconds; so do the LM head of a decode step
    (one token per sequence) and the embedding lookup."""
    sc = _scenario(preset, profile, precision, parallel)
    rp, gpu = sc.plan, sc.cluster.node.gpu
    eff, dtype, sh = default_efficiency(gpu.architecture), rp.gemm_dtype(gpu), rp.shape_of(batch)
    for layer in {0, rp.model.layers - 1}:
        serving = {g.name: g for g in _layer(sc, batch, layer).gemms if not g.expert}
        training = {g.name: g for g in layer_program(rp.model, sh, dtype, layer_index=layer, phases=FWD).gemms
                    if not g.expert}
        shared = set(serving) & set(training)
        assert shared >= {"o_proj"} or shared >= {"router"}
        for name in shared:
            assert serving[name] == training[name]
            assert gemm_op_seconds([serving[name]], gpu, eff)[0] == gemm_op_seconds([training[name]], gpu, eff)[0]
    if batch.new == 1:   # training's head runs the output layer once more per MTP module (batch 1 + mtp_layers)
        head = serving_head_program(rp, batch, dtype, rp.weight_dtype(gpu)).gemms[0]
        train = head_program(rp.model, sh, dtype).gemms_in("fwd")[0]
        assert head == replace(train, batch=1)
        assert gemm_op_seconds([head], gpu, eff)[0] == gemm_op_seconds([replace(train, batch=1)], gpu, eff)[0]
    served = price_serving(serving_embedding_program(rp, batch), gpu, eff)["memory_ops"]
    assert served == mem_op_seconds(embedding_program(rp.model, sh).memops, gpu, eff, "fwd")
