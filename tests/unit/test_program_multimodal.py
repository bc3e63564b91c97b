"""The programs of the modules a multimodal model adds (simulator/program/multimodal.py): FLOPs by hand, the dtype
on each op, the backward's GEMMs, and their price (simulator.pricing.compute.price) against the GEMM timings by
hand."""

import pytest

from simulator.compute import default_efficiency
from simulator.compute.gemm import gemm_times
from simulator.hardware import load_gpu
from simulator.plan import Batch
from simulator.pricing.compute import price
from simulator.program import (
    contrastive_logits_program,
    cross_attention_program,
    pooler_program,
    projector_program,
)

GPU, EFF = load_gpu("h200_sxm"), default_efficiency("hopper")
# CoCa L/14's multimodal decoder: T = 76 text tokens of h = 768 (12 heads) read N = 255 pooled tokens of width 768,
# OpenCLIP's cross-attention blocks with their 3072-wide GELU MLP (docs/multimodal.md: 1557.7 MFLOP per block)
COCA_BLOCK = dict(image_tokens=255, hidden=768, image_hidden=768, heads=12, tp=1, mlp=3072)


def test_cross_attention_block_flops_by_hand():
    p = cross_attention_program(Batch(1, 76), dtype="bf16", **COCA_BLOCK)
    assert p.kind == "cross_attention"
    assert p.fwd_flops == 1_557_688_320
    assert p.bwd_flops == 2 * p.fwd_flops
    # a micro-batch of 8 on TP 2: 8x the samples, half of every GEMM on each rank
    p8 = cross_attention_program(Batch(8, 76), dtype="bf16", **{**COCA_BLOCK, "tp": 2})
    assert p8.fwd_flops == 8 * 1_557_688_320 / 2
    # forward in model order, then each GEMM's two backward GEMMs at its shape
    names = [g.name for g in p.gemms_in("fwd")]
    assert names == ["cross_attn.q", "cross_attn.o", "cross_attn.k", "cross_attn.v", "cross_attn.qk", "cross_attn.pv",
                     "cross_attn.mlp.up0", "cross_attn.mlp.down"]
    assert len(p.gemms) == 3 * len(names)
    # the linear projections' backward is a data and a weight gradient; the scores' two operand gradients
    assert [g.name for g in p.gemms_in("bwd_wgrad")] == [f"{n}.d1" for n in names if not n.endswith(("qk", "pv"))]


def test_pooler_flops_by_hand():
    """OpenCLIP coca_ViT-L-14's pooler, one sample: 4 q w^2 + 4 N h_v w + 4 q N w = 1.615 GFLOP (256 queries of 768
    over the 257 ViT-L tokens of 1024); the paper's design adds a pooler of one query."""
    one = pooler_program(Batch(1, 257), (256,), tokens=257, width=768, hidden=1024, heads=8, tp=1, dtype="bf16")
    assert one.fwd_flops == 1_614_544_896
    two = pooler_program(Batch(1, 257), (256, 1), tokens=257, width=768, hidden=1024, heads=8, tp=1, dtype="bf16")
    q1 = 4 * 1 * 768**2 + 4 * 257 * 1024 * 768 + 4 * 1 * 257 * 768
    assert two.fwd_flops == 1_614_544_896 + q1
    assert two.kind == "pooler"


def test_projector_and_logits_flops_by_hand():
    # LLaVA-1.5: 576 tokens x 1024 -> 4096 -> 4096, TP 2
    proj = projector_program(576, 1024, 4096, 4096, 2, "bf16")
    assert proj.fwd_flops == 2 * 576 * (1024 * 4096 + 4096 * 4096) / 2
    assert proj.bwd_flops == 2 * proj.fwd_flops
    # contrastive logits on a loss rank of b = 512 of B = 32768, e = 1024: 4 b B e forward, 12 b B e in all
    logits = contrastive_logits_program(512, 1024, 32768, "bf16")
    assert logits.fwd_flops == 4 * 512 * 32768 * 1024
    assert logits.fwd_flops + logits.bwd_flops == 12 * 512 * 32768 * 1024


def test_dtypes_under_fp8():
    """Linear projections in the plan's GEMM dtype; scores, values and logits stay 16-bit (attention_dtype)."""
    p = cross_attention_program(Batch(2, 76), dtype="fp8", **COCA_BLOCK)
    for g in p.gemms:
        core = g.name.startswith(("cross_attn.qk", "cross_attn.pv"))
        assert g.dtype == ("bf16" if core else "fp8"), g.name
    assert {g.dtype for g in projector_program(576, 1024, 4096, 4096, 1, "fp8").gemms} == {"fp8"}
    assert {g.dtype for g in contrastive_logits_program(512, 1024, 32768, "fp8").gemms} == {"bf16"}
    assert {g.dtype for g in cross_attention_program(Batch(2, 76), dtype="bf16", **COCA_BLOCK).gemms} == {"bf16"}


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_price_is_the_forward_gemms_by_hand_and_twice_that_backward(dtype):
    p = cross_attention_program(Batch(4, 76), dtype=dtype, **COCA_BLOCK)
    by_hand = sum(float(gemm_times(g.m, g.k, g.n, g.batch, GPU, EFF, g.dtype)) for g in p.gemms_in("fwd"))
    t = price(p, GPU, EFF)
    assert t.fwd_s == pytest.approx(by_hand, rel=1e-12)
    assert t.bwd_s == pytest.approx(2 * by_hand, rel=1e-12)
    assert t.attn_fwd_s == 0.0 and t.fwd_flops == p.fwd_flops
    # the contrastive logits: two products forward, four backward, one shape
    lg = contrastive_logits_program(512, 1024, 32768, dtype)
    one = float(gemm_times(512, 1024, 32768, 1, GPU, EFF, "bf16"))
    lt = price(lg, GPU, EFF)
    assert (lt.fwd_s, lt.bwd_s) == (pytest.approx(2 * one, rel=1e-12), pytest.approx(4 * one, rel=1e-12))
