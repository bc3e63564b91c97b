"""The development set of published runs (issue 11): sourced, simulated, and its error tracked."""

import pytest

from simulator.scenario.load import load_scenario
from simulator.validation import published


@pytest.fixture(scope="module")
def runs():
    return published.published_runs()


def test_development_set_has_15_or_more_sourced_runs_in_every_group():
    rows = published.read_runs()
    assert len(rows) >= 15
    assert {r["group"] for r in rows} == {"dense", "fp8", "moe"}
    assert all(r["source"] and r["source_locator"] for r in rows)


def test_tflops_per_gpu_converts_with_megatrons_full_attention_flops():
    """Mixtral 8x7B, 64 H100, GBS 256 x 4096: 438 TFLOP/s per GPU (Megatron-Core MoE README) is 3.102 s/step
    with Megatron's num_floating_point_operations (full s^2 attention)."""
    row = next(r for r in published.read_runs() if r["id"] == "mcore_mixtral8x7b_h100_64")
    scenario = load_scenario(published.RUNS / "mcore_mixtral8x7b_h100_64.yaml")
    assert published.measured_step_s(row, scenario) == pytest.approx(3.102, rel=1e-3)


def test_development_set_error_does_not_regress(runs):
    """Ratchet, not the target: the issue 11 bars (mean 10%, groups 15%, median +-5%) are not met yet; the errors
    measured when this set was added (mean 16.8%, dense 24.4%, fp8 5.1%, MoE 30.8%, median -13.7%), and after the
    expected-slowest-GPU term (15.6%, 22.4%, 4.9%, 28.6%, -11.4%), may only shrink. The FP8 group moved once the
    other way on purpose: its GEMMs took bf16's efficiency until the H200 measurement gave fp8 its own (0.679 of
    the fp8 peak, not 0.720) and the recipe gained its quantization kernels: 4.9% optimistic -> 11.7% pessimistic
    (mean 18.7%). Measured grouped-GEMM efficiency for the routed experts: MoE 28.6% -> 26.4%, mean 18.3%,
    median -8.7%. Session 3 (23 runs): bf16 gradient reduction as the MLPerf configs set it (fp8 11.7% -> 6.1%),
    Megatron per-module recompute for the Qwen3 runs, the experts' activation kernel, the 1F1B A2A overlap row:
    mean 15.5%, dense 22.4%, fp8 6.1%, MoE 23.0%, median -8.3%. Session 4: what the dense sources say their
    stacks ran (MT-NLG / BLOOM predate FlashAttention; BLOOM's Omni-Path network and DeepSpeed BF16_Optimizer's
    per-micro-batch fp32 accumulation; FlagPerf's FlashAttention-2 at its H200-measured rate, its backward counting
    the in-kernel Q K^T recomputation as measured): 23 runs mean 12.4%, dense 13.5%; with seven FlagPerf DGX A800
    runs joined unseen (-1.7..-7.1%): 30 runs, mean 10.4%, dense 9.1%, median -3.2%. Session 5: the host issue
    floor of eager MoE layers measured on the H200 (simulator.compute.host): Qwen3 TP4 EP8 -49.0% -> -15.0%,
    MoE 16.1%, mean 9.3%. Then two FlagPerf MoE runs joined unseen (core_v0.6-era Megatron: Mixtral 8x7B TP8 EP1
    on 32 H100, a Qwen1.5-style 8-expert model on 8 A800) and came out optimistic (-42%, -28%); the MoE block's TP
    all-gather / reduce-scatter when experts are tensor-parallel (etp > 1) brought Mixtral to -35%: 32 runs, mean
    10.7%, MoE 20.5% (9.3% / 16.1% on the 30 earlier runs). Session 6: the permute / unpermute and the cross
    entropy as the runs' Megatron versions write them, measured on the H200 (simulator.program.op_chains):
    FlagPerf Mixtral -34.9% -> -11.1%, FlagPerf Qwen -28.1% -> -7.9%, MCore v0.8 Mixtral -6.0% -> -1.1%, the
    FlagPerf dense rows' unfused loss -3.3..-7.1% -> -7.4..+4.6%; the all-to-all dispatcher's second sort by local
    expert (zoo A2A PP32 -30.0% -> -28.3%): mean 8.65%, dense 8.15%, MoE 13.3%, median -0.3% (every bar met on
    the development set). Session 7: five more rows of the Megatron MoE model zoo's Qwen3-235B H100 table joined
    unseen: the long-context table (16K-128K tokens, TP4 CP1-8, forced balance: -8.0, -6.0, -1.9, -0.5%) and the
    intra-node EP row with Megatron's FSDP (+58.2%: its per-micro-batch parameter gathers over InfiniBand are
    hidden but charged the NVLink-fitted overlap interference): 37 runs, mean 9.50%, dense 8.15%, MoE 13.98%,
    median -0.56%. Then hidden collectives that cross the network charged the SMs their NCCL channels hold
    instead of the NVLink-fitted 0.67 (simulator.pricing.overlap.network_interference): FSDP row +58.2% ->
    +7.8%, MLPerf FP8 rows 0.2-5 points faster, the CP rings of the 64K / 128K rows -1.9 / -0.5% -> -4.8 / -4.3%:
    mean 8.27%, fp8 5.41%, MoE 10.80%, median -3.04% (the median moved toward optimism; still within +-5%). Then
    the training default of moe.overlap became sequential, as Megatron-Core runs DeepEP (fused_a2a.py,
    async_finish=False): zoo EP32 -16.8% -> -1.5%, EP32 + A2A overlap -13.1% -> -2.2%, long context -9.6..-3.2%
    -> -6.5..-3.0%, FSDP +7.8% -> +17.1%: mean 7.58%, MoE 8.69%, median -1.48%. Then a data-parallel collective
    over the network hides behind the exposed NVLink communication too (simulator.schedule.costs.dp_window: its
    NICs are idle while the GPU waits on NVLink): FSDP +17.1% -> +0.5%, MLPerf GPT-3 at 4096 / 10752 / 11616 GPUs
    -3.0 / -5.6 / +0.8% -> -3.8 / -6.8 / -0.9%, Llama 3.1 405B rows 0.1-0.8 points closer: mean 7.16%, fp8 5.43%
    (5.41% before: the ratchet gives it 0.02 points), MoE 7.35%, median -1.48%. Then the output layer multiplies
    the padded vocabulary memory holds (issue 26 drift fix: Megatron pads to a multiple of 128 x tp, GPT-3's 50257
    rows: 50688 at TP 4, 51200 at TP 8): MLPerf GPT-3 fp8 rows 0.01-0.05% slower, mean 7.155% -> 7.153%, dense 8.149% ->
    8.144%, MoE 7.353% -> 7.350%, fp8 5.428% -> 5.430% (over the 5.43% gate by 0.0004 points: moved to 5.44%).
    Then the deepspeed profile's pipeline engine and BF16_Optimizer (separate blocking receives, the whole-gradient
    all-reduce, the fp32 tied-embedding sync) with BLOOM's dropout 0.1 and ALiBi, and MT-NLG's rows naming that
    profile (test_deepspeed_rows_pinned): mean 7.153% -> 7.007%, dense 8.144% -> 7.784%, median unchanged.
    Tighten as the model improves."""
    s = published.summary(runs)
    assert s["mean"] <= 0.0701
    assert s["mean_dense"] <= 0.0779 and s["mean_fp8"] <= 0.0544 and s["mean_moe"] <= 0.0736
    assert abs(s["median_signed"]) <= 0.05 and s["median_signed"] >= -0.0149
    assert s["oom_trained"] == 0


def test_deepspeed_rows_pinned(runs):
    """The deepspeed profile's rows (issue 28: one within 10%), pinned so the table fails when they move. BLOOM
    91.27 s (-13.3%) -> 96.19 s (-8.6%), in the order applied: separate blocking receives (a 5.02 ms receive of
    29.4 MB over Omni-Path per micro-batch on the busiest stage), BF16_Optimizer's all-reduce in place of a
    reduce-scatter (+0.53 s exposed DP) and its fp32 tied-embedding sync (+0.33 s): 93.01 s; dropout 0.1 (tr11
    README): 95.29 s; ALiBi's bias written into the scores, net of RoPE: 96.19 s.
    MT-NLG +0.3% each (its fp16 ZeRO-1 keeps the sharded reduction; 10.5 MB receives over a 25 GB/s HDR link):
    what is left there is not in DeepSpeed's pipeline code (docs/implementation_profiles.md, "DeepSpeed")."""
    err = {r.id: r.predicted_s / r.measured_s - 1 for r in runs}
    assert err["bloom_176b_a100_384"] == pytest.approx(-0.0859, abs=5e-4)
    assert [round(err[f"mtnlg_530b_a100_{g}"], 3) for g in (2240, 2800, 3360)] == [-0.249, -0.257, -0.278]


def test_flagperf_a800_plan_that_ran_out_of_memory_is_predicted_out_of_memory(runs, tmp_path):
    """FlagPerf's A100 ablation (training/nvidia/llama3_8B-megatron/README.md, DGX A800): PP1DP8TP1 'OOM' while the
    seven plans beside it ran; the model agrees on all eight (it predicts 96 GiB of tensors for the plan that did not
    fit, over the HBM before the runtime and NCCL's buffers are added; the seven that ran fit with them)."""
    from simulator.entries.simulate import simulate

    ran = [r for r in runs if r.id.startswith("flagperf_llama3_8b_a800_")]
    assert len(ran) == 7 and not any(r.oom for r in ran)
    base = published.RUNS / "flagperf_llama3_8b_a800_pp2dp4tp1.yaml"
    oom = tmp_path / "flagperf_llama3_8b_a800_pp1dp8tp1.yaml"
    oom.write_text(base.read_text().replace("tp: 1, pp: 2, dp: 4", "tp: 1, pp: 1, dp: 8"))
    scenario = load_scenario(oom)
    assert (scenario.parallel.pp, scenario.parallel.dp) == (1, 8)
    memory = simulate(scenario).memory
    assert memory.peak_bytes > scenario.cluster.node.gpu.memory.capacity and memory.oom
