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


def test_each_query_head_processes_its_k_v_head(tp2):
    """4 sequences at 1024 cached + 1 new, per rank 4 K/V heads x 128 x (K, V) x 1 B = 1024 B a token: HBM reads the
    cache once, 4 x 1025 x 1024 = 4,198,400 B at 0.639 x 4.8 TB/s (the 8-bit rate) = 1.369 us; the 4 x 32 = 128
    CTAs (one per query head) take 128 x 11.0 ns = 1.408 us plus 4 x 1025 keys x 32 heads x 256 = 33,587,200
    elements at 3.78e12/s = 8.885 us: 10.293 us, above the FLOPs (67,174,400 at 256 / 4096 of 989.4 TFLOP/s =
    1.086 us); plus one launch. flash_decoding reads the same 4,198,400 B and has no per-CTA work."""
    batch = Batch(sequences=4, new=1, cached=1024)
    op = _attention(tp2, batch, "masked_mha")
    assert (op.kv_bytes, op.elements, op.ctas, op.flops) == (4_198_400, 33_587_200, 128, 67_174_400)
    assert op.kv_read_efficiency == 0.639
    gpu, eff = tp2.cluster.node.gpu, default_efficiency("hopper")
    assert 128 * 11.0e-9 + 33_587_200 / 3.78e12 == pytest.approx(10.293e-6, rel=1e-4)
    assert cache_attention_seconds(op, gpu, eff) == pytest.approx(eff.launch_s + 128 * 11.0e-9 + 33_587_200 / 3.78e12,
                                                                  rel=1e-12)
    assert 4_198_400 / (0.639 * 4.8e12) == pytest.approx(1.369e-6, rel=1e-3)
    assert 67_174_400 / (989.4e12 / 16) == pytest.approx(1.086e-6, rel=1e-3)
    fd = _attention(tp2, batch, "flash_decoding")
    assert (fd.kv_bytes, fd.elements, fd.kv_read_efficiency) == (4_198_400, 0.0, 0.94)


def test_a_long_mha_cache_is_bound_by_hbm():
    """Llama 2 13B's shape (40 heads = 40 K/V heads), 64 sequences at 2175 cached + 1 new, FP8 cache: 64 x 2176 x 40
    x 256 x 1 B = 1,426,063,360 B at 0.639 x 4.8 TB/s = 464.9 us, above the CTAs' 2560 x 11.0 ns + 1,426,063,360
    elements / 3.78e12 = 405.4 us; with a 16-bit cache twice the bytes at 0.855 x 4.8 TB/s = 695.0 us. Measured
    (simulator/validation/data/h200_masked_mha, three runs): 454.8 and 672.1 us."""
    def op_of(dtype):
        sc = load_scenario({"system": {"profile": "hgx_h200", "nodes": 1, "gpus": 1},
                            "model": dict(LLAMA2_70B, name="llama2-13b", hidden=5120, heads=40, kv_heads=40),
                            "training": {"mode": "inference", "precision": "fp8", "kv_cache_dtype": dtype,
                                         "framework": "tensorrt_llm_v0_5"},
                            "serving": {"batch": 4, "input_len": 1024, "output_len": 2}})
        return sc, _attention(sc, Batch(sequences=64, new=1, cached=2175), "masked_mha")
    eff = default_efficiency("hopper")
    for dtype, bytes_, read in (("fp8", 1_426_063_360, 0.639), ("bf16", 2_852_126_720, 0.855)):
        sc, op = op_of(dtype)
        assert (op.kv_bytes, op.elements) == (bytes_, 1_426_063_360)
        assert cache_attention_seconds(op, sc.cluster.node.gpu, eff) == pytest.approx(
            eff.launch_s + bytes_ / (read * 4.8e12), rel=1e-12)
    assert 1_426_063_360 / (0.639 * 4.8e12) == pytest.approx(464.9e-6, rel=1e-3)
    assert 2560 * 11.0e-9 + 1_426_063_360 / 3.78e12 == pytest.approx(405.4e-6, rel=1e-3)


def test_one_sequence_is_bound_by_its_ctas_work(tp2):
    """Batch 1 (not measured: the kernel's rates come from 2048 CTAs and more): the 32 CTAs' 32 x 11.0 ns + 1025 x
    32 x 256 = 8,396,800 elements at 3.78e12/s = 2.573 us, above the cache (1,049,600 B at the 32 CTAs' assumed cap
    of 32 x 44.5 GB/s = 1.424 TB/s: 0.737 us)."""
    op = _attention(tp2, Batch(sequences=1, new=1, cached=1024), "masked_mha")
    assert op.kv_cap_Bps == pytest.approx(32 * 44.5e9)
    eff = default_efficiency("hopper")
    assert cache_attention_seconds(op, tp2.cluster.node.gpu, eff) == pytest.approx(
        eff.launch_s + 32 * 11.0e-9 + 8_396_800 / 3.78e12, rel=1e-12)
    assert 1_049_600 / 1.424e12 == pytest.approx(0.737e-6, rel=1e-3)
