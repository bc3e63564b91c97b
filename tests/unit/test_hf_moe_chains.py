"""Hugging Face's MoE block as transformers 5.17 runs it (issue 28): the per-class GPU time of the 4-layer OLMoE
Kineto traces on one H200 (benchmarks/hf_moe_trace_classes.py), the copy-equivalent bytes fitted on them
(op_chains.HF_EXPERT_CHAINS), the program ops that carry them, and the 16-layer OLMoE rows they predict."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.compute import default_efficiency
from simulator.hardware import load_gpu
from simulator.implementation.profiles import profile_named
from simulator.program.memops import LayerShape, layer_memops
from simulator.program.op_chains import FUSED_PERMUTE, HF_EXPERT_CHAINS, PERMUTE_CHAINS

ROOT = Path(__file__).resolve().parents[2]
import benchmarks.hf_moe_trace_classes as moe_trace  # noqa: E402

GPU, EFF = load_gpu("h200_sxm"), default_efficiency("hopper")
RATE = GPU.memory.bandwidth * EFF.memory_efficiency   # 4.8e12 B/s x 0.803 = 3.854e12 B/s
T, K, H, F, E = 4096, 8, 2048, 1024, 64                # OLMoE-1B-7B config.json at 4 x 1024 tokens
R = T * K


@pytest.fixture(scope="module")
def grouped():
    return moe_trace.attribute(moe_trace.TRACES / moe_trace.FILES["grouped_mm"])


@pytest.fixture(scope="module")
def loop():
    return moe_trace.attribute(moe_trace.TRACES / moe_trace.FILES["eager"])


def test_grouped_mm_masked_fill_is_the_largest_non_gemm_class(grouped):
    """transformers 5.17's grouped_mm path masks the gathered rows in place and both grouped GEMM outputs out of
    place: 3 masked_fill kernels + 2 copies per layer forward on [R, 2048] bf16 tensors. Each in-place pass reads
    and writes R x h x 2 B = 134.2 MB each way, 268 MB, and ran 188 us (1.43 TB/s: the mask broadcast over h
    keeps the elementwise kernel unvectorised); the two copies 63 us each: 3 x 188 + 2 x 63 = 690 us."""
    n, sec = grouped[("masked_fill", "forward")]
    assert n == pytest.approx(5.0)
    assert sec == pytest.approx(687.7e-6, rel=0.002)
    assert sec > grouped[("expert activation", "forward")][1] * 3   # SwiGLU: 189 us


def test_grouped_mm_expert_gemms_run_near_the_dense_rate(grouped):
    """Forward: gate/up 2 R h (2f) = 275.0 GFLOP and down 2 R f h = 137.4 GFLOP in 752.2 us per layer: 548
    TFLOP/s; backward twice the FLOPs in 1535.6 us (537 TFLOP/s)."""
    fwd = grouped[("expert gemm", "forward")][1]
    bwd = grouped[("expert gemm", "backward")][1]
    flops = 2 * R * H * 2 * F + 2 * R * F * H
    assert fwd == pytest.approx(752.2e-6, rel=0.002)
    assert flops / fwd / 1e12 == pytest.approx(548, rel=0.01)
    assert 2 * flops / bwd / 1e12 == pytest.approx(537, rel=0.01)


def test_loop_select_backward_writes_and_adds_a_whole_weight_gradient_per_expert(loop):
    """The eager loop indexes gate_up_proj[e] and down_proj[e] of the stacked [64, ...] weights; each index's
    backward writes zeros the size of the whole stacked tensor (2 B per parameter) and adds it into the accumulated
    gradient (read 4, write 2 B): 8 B x 402,653,184 expert parameters (64 x 3 x 2048 x 1024) x 64 experts =
    206.2 GB per layer, 53.5 ms at 3.854 TB/s; measured 50.05 ms (7.49 B per parameter per expert)."""
    n, sec = loop[("expert weight grad", "backward")]
    params = E * 3 * H * F
    assert params == 402_653_184
    assert sec == pytest.approx(50.05e-3, rel=0.002)
    assert 8 * params * E / RATE == pytest.approx(53.5e-3, rel=0.005)
    assert sec * RATE / (params * E) == pytest.approx(7.49, abs=0.005)
    assert 370 < n < 390   # 2 x 64 fills, 2 x 63 adds, their copies: about 3 x 128 kernels per layer


def test_loop_reads_the_device_five_times_per_expert(loop):
    """Per expert hit: is_nonzero, where's nonzero size and three item reads: 5 device-to-host copies, each a
    cudaStreamSynchronize; 1274 over 4 layers x 64 experts = 318.5 per layer, 4.98 per expert (the profile's
    syncs.per_expert_forward)."""
    n, _ = loop[("device-to-host", "forward")]
    assert n == pytest.approx(318.5)
    assert profile_named("hf_per_expert_loop").syncs.per_expert_forward == pytest.approx(n / E, abs=0.005)


def test_chains_are_the_fits_of_the_traces():
    """op_chains.HF_EXPERT_CHAINS are fit_chain of the two traces to the digits written (no forward kernel touches
    the stacked expert weights outside the GEMMs: the forward per-parameter term is 0 in both)."""
    for name in ("grouped_mm", "eager"):
        chain = HF_EXPERT_CHAINS["hf_grouped_mm" if name == "grouped_mm" else "hf_expert_loop"]
        for key, value in moe_trace.fit_chain(name).items():
            if key == "fwd_expert_param":
                assert value == 0.0
                continue
            assert getattr(chain, key) == pytest.approx(value, abs=0.006), (name, key)
    assert set(HF_EXPERT_CHAINS) <= set(PERMUTE_CHAINS)


def _olmoe():
    from simulator import load_scenario
    from simulator.validation.hf_train import scenario_for

    return load_scenario(scenario_for(OLMOE_RUN)).plan.model


OLMOE_RUN = {"model": "olmoe-1b-7b", "section": "moe", "micro_batch": 4, "seq": 1024, "experts_applied": "grouped_mm"}


def test_olmoe_layer_memops_by_hand():
    """OLMoE at 4 x 1024 (R = 32768, T = 4096, h = 2048, f = 1024, 64 experts) with the grouped_mm chain: forward
    (64.31 R + 14.69 T) h = 4,438,999,695.36 B (1.152 ms at 3.854 TB/s: the trace's 1,340.7 us less the SwiGLU's
    189.1 us), backward (96.31 R + 7.81 T) h = 6,528,769,720.32 B; SwiGLU 21.72 R f = 728,802,263.04 B forward and
    35.91 R f = 1,204,939,653.12 B backward in place of the fused 6 and 10 R f; the loop adds 7.49 x 64 x
    402,653,184 = 193,015,830,282.24 B of weight-gradient traffic in backward, none for grouped_mm."""
    model = _olmoe()
    shape = LayerShape(tokens=T, norm_tokens=T, scores=0.0, ffn_local=0.0, qk_width=0.0, expert_ffn_local=F)

    def ops(chain):
        return {(o.name, o.phase): o.bytes for o in layer_memops(model, shape, unfused_attention=False,
                                                                 moe_routed_tokens=R, permute=chain,
                                                                 local_experts=E)}
    g = ops(HF_EXPERT_CHAINS["hf_grouped_mm"])
    assert g["moe_permute", "fwd"] == pytest.approx(4_438_999_695.36, rel=1e-9)
    assert g["moe_permute", "bwd"] == pytest.approx(6_528_769_720.32, rel=1e-9)
    assert g["expert_activation", "fwd"] == pytest.approx(728_802_263.04, rel=1e-9)
    assert g["expert_activation", "bwd"] == pytest.approx(1_204_939_653.12, rel=1e-9)
    assert ("expert_weight_grad", "bwd") not in g
    assert g["moe_permute", "fwd"] / RATE == pytest.approx(1.1517e-3, rel=1e-3)
    loop = ops(HF_EXPERT_CHAINS["hf_expert_loop"])
    assert loop["expert_weight_grad", "bwd"] == pytest.approx(193_015_830_282.24, rel=1e-9)
    fused = ops(FUSED_PERMUTE)
    assert fused["expert_activation", "fwd"] == 6 * R * F and ("expert_weight_grad", "bwd") not in fused


def test_profiles_name_their_chain_and_other_frameworks_keep_the_scenarios():
    assert profile_named("hf_transformers").moe_permute == "hf_grouped_mm"
    assert profile_named("hf_per_expert_loop").moe_permute == "hf_expert_loop"
    for name in ("megatron", "pytorch", "torchtitan"):
        assert profile_named(name).moe_permute is None


def test_full_size_olmoe_rows_are_predicted_within_six_percent():
    """Validation (the chains were fitted on the 4-layer traces): the 16-layer OLMoE-1B-7B rows of
    h200_hf/train.jsonl, 4 x 1024 tokens: grouped_mm measured 188.2 ms, predicted 189.1 (+0.5%; 140.5, -25.3%,
    before the chain and the q/k norms); the eager loop measured 1376.6 ms, predicted 1353 (-1.7%; 1165, -15.4%,
    before)."""
    from simulator.validation.hf_train import train_rows

    rows = {r.case: r for r in train_rows() if r.model == "olmoe-1b-7b"}
    g = rows["olmoe-1b-7b-4x1024-experts=grouped_mm"]
    e = rows["olmoe-1b-7b-4x1024-experts=eager"]
    assert g.measured_s == pytest.approx(0.1882, abs=1e-4) and e.measured_s == pytest.approx(1.3766, abs=1e-4)
    assert g.predicted_s == pytest.approx(0.1891, rel=0.005)
    assert e.predicted_s == pytest.approx(1.353, rel=0.005)
    assert abs(g.time_error) < 0.02 and abs(e.time_error) < 0.03


def test_olmoe_q_and_k_norms_are_priced_as_the_eager_rmsnorm_chain():
    """OLMoE normalises the whole q and k projections (q_norm, k_norm over [4, 1024, 2048] each): the eager
    RMSNorm chain (52.9 / 103.6 copy-equivalent bytes per element) over T x (q + k width) = 4096 x 4096 elements:
    887,514,726.4 B forward (230 us at 3.854 TB/s; the trace: two chains of 112 us), 1,738,119,577.6 B backward."""
    from simulator.program.memops import eager_chain_memops

    model = _olmoe()
    assert model.qk_norm
    shape = LayerShape(tokens=T, norm_tokens=T, scores=0.0, ffn_local=0.0, qk_width=2 * H, expert_ffn_local=F)
    ops = {(o.name, o.phase): o.bytes for o in eager_chain_memops(model, shape, [])}
    assert ops["norm_qk", "fwd"] == pytest.approx(887_514_726.4, rel=1e-9)
    assert ops["norm_qk", "bwd"] == pytest.approx(1_738_119_577.6, rel=1e-9)
    assert ops["norm_qk", "fwd"] / RATE == pytest.approx(2 * 112e-6, rel=0.04)
