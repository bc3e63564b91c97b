"""The ``masked_mha`` decode attention (TensorRT-LLM's kernel before XQA: one CTA per sequence and query head, each
loading its K/V head for itself) and the ``tensorrt_llm_v0_5`` profile that selects it: hand numbers."""

import pytest

from simulator.compute.efficiency import default_efficiency
from simulator.implementation.profiles import profile_named
from simulator.plan import Batch
from simulator.pricing.serving import cache_attention_seconds
from simulator.program import serving_layer_program
from simulator.scenario import load_scenario
from simulator.serving import backends as B

#: Llama 2 70B's attention shape (64 query heads, 8 K/V heads of 128) at TP 2, FP8 weights and cache
LLAMA2_70B = dict(name="llama2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000,
                  activation="swiglu", norm="rmsnorm", tied_embeddings=False)


@pytest.fixture(scope="module")
def tp2():
    return load_scenario({"system": {"profile": "hgx_h200", "nodes": 1, "gpus": 2}, "model": LLAMA2_70B,
                          "parallel": {"tp": 2},
                          "training": {"mode": "inference", "precision": "fp8", "kv_cache_dtype": "fp8",
                                       "framework": "tensorrt_llm_v0_5"},
                          "serving": {"batch": 4, "input_len": 1024, "output_len": 2}})


def _attention(sc, batch, kernel):
    rp, gpu, s = sc.plan, sc.cluster.node.gpu, sc.serving
    kv = 2 * rp.kv_heads_tp * rp.model.dhead * rp.recipe.kv_cache
    return serving_layer_program(rp, batch, rp.gemm_dtype(gpu), rp.weight_dtype(gpu), layer_index=0,
                                 kv_token_bytes=kv, kernels=B.KERNEL_SETS[s.kernels],
                                 decode_kernel=B.ATTENTION_KERNELS[kernel],
                                 expert_kernel=B.EXPERT_KERNELS[s.expert_kernel]).attention


def test_profile_is_the_2023_engine(tp2):
    p = profile_named("tensorrt_llm_v0_5")
    assert {"attention": "masked_mha", "tp_allreduce": "nccl"}.items() <= dict(p.serving_defaults).items()
    s = tp2.serving
    assert (s.attention, s.tp_allreduce, s.max_batched_tokens, s.cuda_graphs) == ("masked_mha", "nccl", None, False)
    assert (s.kv_cache_impl, s.scheduler.policy) == ("paged", "trtllm")       # the rest from tensorrt_llm


def test_each_query_head_reads_its_k_v_head(tp2):
    """4 sequences at 1024 cached + 1 new, per rank 4 K/V heads x 128 x (K, V) x 1 B = 1024 B a token: the cache is
    4 x 1025 x 1024 = 4,198,400 B, read by 32 / 4 = 8 query heads each: 33,587,200 B at 0.94 x 4.8 TB/s = 7.444 us,
    above the FLOPs (2 x 4 x 1025 x 256 x 32 = 67,174,400 at 256 / 4096 of 989.4 TFLOP/s = 1.086 us) and under the
    cap of 4 x 32 CTAs x 44.5 GB/s = 5.70 TB/s; plus one launch. flash_decoding reads the 4,198,400 B once."""
    batch = Batch(sequences=4, new=1, cached=1024)
    op = _attention(tp2, batch, "masked_mha")
    assert op.kv_bytes == 33_587_200 and op.flops == 67_174_400
    gpu, eff = tp2.cluster.node.gpu, default_efficiency("hopper")
    assert cache_attention_seconds(op, gpu, eff) == pytest.approx(eff.launch_s + 33_587_200 / (0.94 * 4.8e12),
                                                                  rel=1e-12)
    assert 67_174_400 / (989.4e12 / 16) == pytest.approx(1.086e-6, rel=1e-3)
    assert _attention(tp2, batch, "flash_decoding").kv_bytes == 4_198_400


def test_one_sequence_is_capped_by_its_ctas(tp2):
    """Batch 1: 32 CTAs x 44.5 GB/s = 1.424 TB/s, under 0.94 x 4.8 TB/s: the 8 x 1025 x 1024 B take 5.896 us."""
    op = _attention(tp2, Batch(sequences=1, new=1, cached=1024), "masked_mha")
    assert op.kv_cap_Bps == pytest.approx(32 * 44.5e9)
    eff = default_efficiency("hopper")
    assert cache_attention_seconds(op, tp2.cluster.node.gpu, eff) == pytest.approx(
        eff.launch_s + 8 * 1025 * 1024 / 1.424e12, rel=1e-12)
