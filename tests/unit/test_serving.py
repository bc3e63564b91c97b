"""Serving step model (simulator/serving): hand-computed numbers, invariants and input errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.entries.serve import simulate_serving
from simulator.errors import UserError
from simulator.hardware import load_node
from simulator.plan import MOE_BACKENDS, SERVING_BACKENDS
from simulator.program import touched_experts
from simulator.scenario import load_scenario
from simulator.serving import backends as B

H200 = load_node("hgx_h200").gpu
LAUNCH, MEM_EFF = 2.68e-6, 0.803  # simulator/compute/data/compute_efficiency.yaml, hopper


def scenario(**serving) -> dict:
    base = {"batch": 1, "input_len": 1024, "output_len": 1}
    return {"system": {"profile": "hgx_h200", "gpus": 1}, "model": {"preset": "llama3-8b"},
            "training": {"mode": "inference", "precision": "bf16"}, "serving": {**base, **serving}}


def serve(**serving):
    return simulate_serving(load_scenario(scenario(**serving)))


def test_batch_one_decode_gemms_are_weight_reads():
    """Llama-3-8B, one token: every GEMM streams its weights (plus the tiny activations) at 0.803 x 4.8 TB/s."""
    bw = H200.memory.bandwidth * MEM_EFF
    shapes = [(4096, 6144), (4096, 4096), (4096, 2 * 14336), (14336, 4096)]  # qkv, o, gate_up, down
    layer = sum(LAUNCH + 2 * (k + k * n + n) / bw for k, n in shapes)
    head = LAUNCH + 2 * (4096 + 4096 * 128256 + 128256) / bw
    assert serve().decode.breakdown_s["gemm"] == pytest.approx(32 * layer + head, rel=1e-9)
    # (32 x 218.1 M + 525.3 M) x 2 B = 15.0 GB at 3.85 TB/s = 3.90 ms, + 129 launches x 2.68 us = 0.35 ms
    assert 32 * layer + head == pytest.approx(4.24e-3, rel=0.01)


def test_decode_attention_streams_the_cache():
    """Split-KV decode: 32 layers x (1024 + 1) tokens x 8 K/V heads x 128 x 2 (K, V) x 2 B at 0.94 x 4.8 TB/s;
    PyTorch's unsplit kernel is capped at 8 CTAs x 44.5 GB/s."""
    kv = (1024 + 1) * 8 * 128 * 2 * 2
    split = serve().decode.breakdown_s["attention"]
    assert split == pytest.approx(32 * (LAUNCH + kv / (0.94 * 4.8e12)), rel=1e-9)
    sdpa = serve(attention="torch_sdpa").decode.breakdown_s["attention"]
    assert sdpa == pytest.approx(32 * (LAUNCH + kv / (8 * 44.5e9)), rel=1e-9)


def test_without_cuda_graphs_the_host_issues_every_kernel():
    """Plain PyTorch kernel set: 27 kernels per layer x 32 + 4 = 868 kernels x 13.3 us = 11.5 ms, above the GPU's
    ~6.6 ms: host-bound. The fused set (356 kernels, 4.7 ms) stays GPU-bound at batch 1."""
    eager = serve(cuda_graphs=False, kernels="torch_eager").decode
    assert eager.kernels == 868
    assert eager.step_s == pytest.approx(868 * 13.3e-6, rel=1e-12) and eager.gpu_s < eager.step_s
    assert eager.breakdown_s["host"] == pytest.approx(eager.step_s - eager.gpu_s)
    fused = serve(cuda_graphs=False).decode
    assert fused.kernels == 356 and fused.step_s == fused.gpu_s > 356 * 13.3e-6


def test_touched_experts():
    """One token picks top_k = 8 of 256 experts; many tokens touch all of them; EP splits them."""
    sc = load_scenario({"system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
                        "parallel": {"tp": 1, "ep": 8}, "training": {"mode": "inference", "precision": "fp8"},
                        "serving": {"batch": 1, "input_len": 8, "output_len": 1}})
    model, rp = sc.model, sc.plan
    assert touched_experts(model, rp.parallel.ep, 1 / 8) == pytest.approx(32 * (1 - (1 - 8 / 256) ** 1))  # one token in the group
    assert touched_experts(model, rp.parallel.ep, 10_000) == pytest.approx(32.0)


def test_ttft_tpot_and_throughput_definitions():
    r = serve(batch=8, input_len=512, output_len=64)
    d = r.to_dict()
    assert d["ttft_s"] == d["prefill"]["step_s"]
    assert d["e2e_s"] == pytest.approx(d["ttft_s"] + 63 * d["tpot_s"])
    assert d["throughput"]["tokens_per_s"] == pytest.approx(8 * 64 / d["e2e_s"])
    assert d["decode"]["step_s"] <= d["decode"]["mean_step_s"]  # the context grows over the output


def test_chunked_prefill_costs_at_least_one_prefill():
    whole = serve(input_len=8192).prefill.step_s
    chunked = serve(input_len=8192, max_batched_tokens=2048).prefill.step_s
    assert chunked > whole * 0.95  # same GEMM work; attention over the cached past adds reads


def test_registries_carry_sources():
    for table in (B.KERNEL_SETS, B.ATTENTION_KERNELS, SERVING_BACKENDS, MOE_BACKENDS, B.EXPERT_KERNELS):
        for name, entry in table.items():
            assert len(entry.source) > 30, name
    assert SERVING_BACKENDS["auto"].for_phase("prefill").name == "deepep_high_throughput"
    assert SERVING_BACKENDS["auto"].for_phase("decode").name == "deepep_low_latency"
    assert SERVING_BACKENDS["pplx"].for_phase("decode").name == "pplx"


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 128), context=st.integers(1, 16384), extra=st.integers(1, 4096))
def test_decode_never_gets_faster_with_more_context_or_batch(batch, context, extra):
    base = serve(batch=batch, input_len=context).decode.step_s
    assert serve(batch=batch, input_len=context + extra).decode.step_s >= base
    assert serve(batch=batch + extra, input_len=context).decode.step_s >= base


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"training": {"mode": "train", "precision": "bf16"}}, "training.mode", "inference"),
    ({"serving": {"batch": 1, "input_len": 8, "output_len": 1, "speed": 2}}, "serving.speed", "unknown"),
    ({"serving": {"batch": 0, "input_len": 8, "output_len": 1}}, "serving.batch", ""),
    ({"serving": {"batch": 1, "input_len": 8, "output_len": 1, "concurrency": []}}, "serving.concurrency", ""),
    ({"serving": {"batch": 1, "input_len": 8, "output_len": 1, "attention": "magic"}}, "serving.attention", ""),
])
def test_bad_serving_input_is_a_located_error(change, key, words):
    with pytest.raises(UserError) as exc:
        load_scenario({**scenario(), **change})
    assert key in str(exc.value) and words in str(exc.value)


def test_cli_errors_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("system: {profile: hgx_h200, gpus: 1}\nmodel: {preset: llama3-8b}\n"
                    "training: {mode: inference}\n")
    assert main(["serve", str(path)]) == 2
    assert "serving" in capsys.readouterr().err
    path.write_text("system: {profile: hgx_h200, gpus: 2}\nmodel: {preset: llama3-8b}\nparallel: {cp: 2}\n"
                    "serving: {batch: 1, input_len: 8, output_len: 2}\n")
    assert main(["serve", str(path)]) == 2
    assert "parallel.cp" in capsys.readouterr().err


def test_cli_writes_csv_and_plot(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("system: {profile: hgx_h200, gpus: 1}\nmodel: {preset: llama3-8b}\n"
                    "serving: {batch: 4, input_len: 256, output_len: 16, concurrency: [1, 4]}\n")
    assert main(["serve", str(path), "--csv", str(tmp_path / "c.csv"), "--plot", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.csv").read_text().splitlines()[0].startswith("concurrency,")
    assert (tmp_path / "c.png").stat().st_size > 1000


def disagg_scenario(prefill_replicas: int, nodes: int = 2) -> dict:
    return {"system": {"profile": "dgx_h100", "nodes": nodes}, "model": {"preset": "llama3-70b"},
            "parallel": {"tp": 4}, "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": 32, "input_len": 4096, "output_len": 512, "concurrency": [4, 256],
                        "disaggregation": {"prefill_replicas": prefill_replicas}}}


def test_disaggregated_kv_handoff_and_pools():
    """Llama-3-70B TP 4: 80 layers x 4096 tokens x (2 K/V heads x 128 x 2 x 2 B) = 320 MiB per GPU, over NVLink
    between replicas of one node. Decode replicas decode without prefill interference; one prefill replica caps
    the request rate at 1 / prefill(1)."""
    d = simulate_serving(load_scenario(disagg_scenario(1))).to_dict()
    k = d["disaggregation"]["kv_transfer"]
    assert k["bytes_per_gpu"] == 80 * 4096 * 2 * 128 * 2 * 2
    assert k["link"] == "nvlink" and 0 < k["time_s"] < k["bytes_per_gpu"] / 100e9
    low, high = d["curve"]
    assert not low["prefill_bound"] and high["prefill_bound"]
    colocated = simulate_serving(load_scenario({**disagg_scenario(1), "serving": {
        **disagg_scenario(1)["serving"], "disaggregation": None}})).to_dict()["curve"][0]
    assert low["tpot_s"] < colocated["tpot_s"]
    one = simulate_serving(load_scenario({**disagg_scenario(1), "serving": {
        "batch": 1, "input_len": 4096, "output_len": 1}})).prefill.step_s
    assert high["tokens_per_s"] == pytest.approx(512 / one, rel=1e-9)


def test_disaggregation_needs_a_decode_replica():
    with pytest.raises(UserError, match="serving.disaggregation.prefill_replicas"):
        load_scenario(disagg_scenario(4))


def test_a_sampled_decode_batch_is_imbalanced():
    """With moe.seed, one decode batch's routing is sampled: 64 tokens x top-8 over 256 experts on EP 8 load the
    busiest rank above the mean, and the expert time grows by that factor; without a seed the counts are expected."""
    base = {"system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
            "parallel": {"tp": 1, "ep": 8}, "training": {"mode": "inference", "precision": "fp8"},
            "serving": {"batch": 64, "input_len": 4096, "output_len": 1, "expert_kernel": "deepgemm"}}
    expected = simulate_serving(load_scenario(base)).decode.breakdown_s["experts"]
    sampled = simulate_serving(load_scenario({**base, "moe": {"seed": 0}})).decode.breakdown_s["experts"]
    assert sampled > 1.05 * expected


def test_mla_decode_runs_at_flashmla_rates():
    """DeepSeek-V3 decode on H200, DP attention: 64 sequences x 4097 keys x 128 heads x 2 x (576 + 512) FLOPs at
    0.586 x 989 TFLOP/s (FlashMLA README, compute-bound) against the latent cache read, 64 x 4097 x 576 x 2 B at
    0.896 x 4.8 TB/s: compute-bound, 7.30e10 / 5.80e14 = 0.126 ms + launch per layer."""
    sc = load_scenario({"system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
                        "parallel": {"tp": 1, "ep": 8}, "training": {"mode": "inference", "precision": "fp8"},
                        "serving": {"batch": 64, "input_len": 4096, "output_len": 1}})
    flops = 2 * 64 * 4097 * 128 * (576 + 512)
    kv = 64 * 4097 * 576 * 2
    per_layer = LAUNCH + max(kv / (0.896 * 4.8e12), flops / (0.586 * H200.dense_peak_flops("bf16")))
    assert flops / (0.586 * H200.dense_peak_flops("bf16")) > kv / (0.896 * 4.8e12)
    assert simulate_serving(sc).decode.breakdown_s["attention"] == pytest.approx(61 * per_layer, rel=1e-9)
    assert per_layer == pytest.approx(0.1286e-3, rel=0.01)


def test_curve_percentiles_and_paged_capacity():
    """Curve quantiles: only the wait for the next iteration varies (uniform), so p50 TTFT is the mean TTFT and
    p99 - p50 = 0.49 iteration. The paged cache rounds each sequence up to whole blocks: 1001 + 8 tokens take 64
    blocks of 16 (1024 tokens), so fewer sequences fit than with 1-token blocks."""
    r = serve(batch=8, input_len=1001, output_len=8, concurrency=[16])
    p = r.curve[0]
    assert p["ttft_p50_s"] == pytest.approx(p["ttft_s"], rel=1e-12)
    assert p["ttft_p99_s"] - p["ttft_p50_s"] == pytest.approx(0.49 * p["tpot_s"], rel=1e-12)
    assert p["e2e_p50_s"] == pytest.approx(p["e2e_s"], rel=1e-12) and p["e2e_p90_s"] < p["e2e_p99_s"]
    fine = serve(batch=8, input_len=1001, output_len=8, kv_block_size=1).kv_capacity_seqs
    assert r.kv_capacity_seqs == pytest.approx(fine * 1009 / 1024, abs=1) and r.kv_capacity_seqs < fine


def test_custom_tp_all_reduce_table():
    """sgl-project/sglang#2904 (H100): vLLM's custom all-reduce takes 11.8 us for 32 KiB at TP 8, SGLang's 7.8 us;
    a decode step of 2 tokens of Llama-3-70B moves 2 x 8192 x 2 B = 32 KiB per all-reduce, 160 per step."""
    base = {"system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-70b"}, "parallel": {"tp": 8},
            "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": 2, "input_len": 1024, "output_len": 1}}
    for name, each in (("vllm_custom", 11.8e-6), ("sglang_custom", 7.8e-6)):
        sc = {**base, "serving": {**base["serving"], "tp_allreduce": name}}
        comm = simulate_serving(load_scenario(sc)).decode
        layer_ops = [c for c in comm.comm if c["dim"] == "tp" and c["op"] == "all_reduce"]
        assert all(c["time_s"] == pytest.approx(each) and c["bytes"] == 32768 for c in layer_ops)
        logits = [c for c in comm.comm if c["op"] == "all_gather"][0]["time_s"]
        assert comm.breakdown_s["tp_comm"] == pytest.approx(160 * each + logits)
    assert B.TP_ALLREDUCE["vllm_custom"].time_s(8, 2 << 20) is None  # beyond the table: NCCL's model


def test_pipeline_decode_keeps_pp_micro_batches_in_flight():
    """Llama-3-70B TP 4 x PP 2, 16 sequences: two micro-batches of 8 in flight; a token takes max(one traversal,
    2 x the slowest stage) at 8 sequences, never more than the 16-sequence batch traversing both stages alone."""
    from simulator.compute.efficiency import default_efficiency
    from simulator.plan import Batch
    from simulator.serving.phases import decode_time
    from simulator.serving.step import StepContext, step_time
    from simulator.topology import topology_of

    sc = load_scenario({"system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-70b"},
                        "parallel": {"tp": 4, "pp": 2}, "training": {"mode": "inference", "precision": "bf16"},
                        "serving": {"batch": 16, "input_len": 2048, "output_len": 1}})
    gpu = sc.cluster.node.gpu
    ctx = StepContext(model=sc.model, gpu=gpu, eff=default_efficiency(gpu.architecture), serving=sc.serving,
                      moe_settings=sc.moe, topology=topology_of(sc.cluster))
    pipelined = decode_time(ctx, sc.plan, 16, 2048)
    alone8 = step_time(ctx, sc.plan, Batch(8, 1, 2048), phase="decode", graphs=True)
    alone16 = step_time(ctx, sc.plan, Batch(16, 1, 2048), phase="decode", graphs=True)
    assert pipelined.kernels == 2 * alone8.kernels
    assert alone8.step_s <= pipelined.step_s <= alone16.step_s
    assert pipelined.step_s == pytest.approx(sum(pipelined.breakdown_s.values()), rel=1e-12)
    assert simulate_serving(sc).decode.step_s == pipelined.step_s


def test_staggered_sequences_fit_more_than_full_length_ones():
    """Continuous batching staggers ages: a sequence of 1024 + 1024 tokens holds 1536 on average (96 pages of 16),
    so 2048 / 1536 = 4/3 as many fit as at full length."""
    r = serve(batch=8, input_len=1024, output_len=1024)
    assert r.kv_capacity_seqs_steady == pytest.approx(r.kv_capacity_seqs * 2048 / 1536, abs=2)


def test_deepgemm_needs_fp8_weights():
    sc = {"system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
          "parallel": {"tp": 1, "ep": 8}, "training": {"mode": "inference", "precision": "bf16"},
          "serving": {"batch": 8, "input_len": 64, "output_len": 1, "expert_kernel": "deepgemm"}}
    with pytest.raises(UserError, match="serving.expert_kernel"):
        simulate_serving(load_scenario(sc))


def test_kv_capacity_is_vllms_share_of_hbm():
    """vLLM's accounting (vllm/v1/worker/gpu_worker.py): gpu_memory_utilization x HBM, minus the weights, the
    transients of the profiled forward and the non-torch memory loaded after the snapshot (runtime 0.75 GiB minus
    the 0.61 GiB CUDA context), holds the cache. Llama-3-8B bf16 on one H200: 8.03 G params x 2 B of
    weights; one sequence of 1024 + 1 tokens in 1-token pages takes 1025 x 32 layers x 8 K/V heads x 128 x 2 x 2 B.
    HBM is what the driver reports: 143,771 MiB on the H200 (hardware_profiles/gpus/h200_sxm.yaml)."""
    from simulator.units.constants import GiB, MiB

    hbm = 143_771 * MiB

    r = serve(batch=1, input_len=1024, output_len=1, kv_block_size=1)
    stage = r.memory.stages[0]
    kv = sum(i.bytes for i in stage.items if i.name == "kv_cache")
    assert kv == 1025 * 32 * 8 * 128 * 2 * 2
    others = stage.peak - kv                       # weights + the prefill's transients
    for utilization in (0.92, 0.9, 0.5):
        budget = utilization * hbm - (0.75 - 0.61) * GiB
        want = int((budget - others) // kv)
        assert serve(batch=1, input_len=1024, output_len=1, kv_block_size=1,
                     gpu_memory_utilization=utilization).kv_capacity_seqs == want
    # the default is vLLM's 0.92: 8% of HBM (12.1 GB) stays with the CUDA context, NCCL and the rest, not the cache
    assert r.kv_capacity_seqs == int((0.92 * hbm - 0.14 * GiB - others) // kv)


def test_a_batch_beyond_the_engines_share_warns():
    """A batch whose cache fits the GPU but not vLLM's share of it gets the out-of-memory warning."""
    cap = serve(batch=1, input_len=4096, output_len=1, gpu_memory_utilization=0.3).kv_capacity_seqs
    r = serve(batch=cap + 1, input_len=4096, output_len=1, gpu_memory_utilization=0.3)
    assert not r.memory.oom and any("OUT OF MEMORY" in w for w in r.warnings)


def test_a_curve_with_no_room_for_the_cache_exits_2():
    """gpu_memory_utilization 0.05 of an H200 (7 GB) leaves no room for Llama-3-8B's 16 GB of weights: no sequence
    fits, so a concurrency curve is a user error naming the key, not a curve of an engine that cannot start."""
    with pytest.raises(UserError, match="holds no sequence") as err:
        serve(batch=1, input_len=1024, output_len=1, gpu_memory_utilization=0.05, concurrency=[1, 4])
    assert err.value.key_path == "serving.gpu_memory_utilization"
    # 8.03e9 parameters x 2 B = 16.06e9 B = 15.0 GiB, over 0.05 x 141 GB less the runtime
    assert "the weights alone (15.0 GiB per GPU) fill the engine's share of HBM (gpu_memory_utilization 0.05:" in str(
        err.value)
    assert serve(batch=1, input_len=1024, output_len=1, gpu_memory_utilization=0.05).kv_capacity_seqs == 0


@pytest.mark.parametrize("value, rule", [("1.5", "less than or equal to 1"), ("0", "greater than 0"),
                                         ("abc", "valid number")])
def test_a_bad_gpu_memory_utilization_exits_2_naming_the_key(tmp_path, capsys, value, rule):
    path = tmp_path / "s.yaml"
    path.write_text("system: {profile: hgx_h200, gpus: 1}\nmodel: {preset: llama3-8b}\n"
                    "training: {mode: inference}\n"
                    f"serving: {{batch: 1, input_len: 8, output_len: 2, gpu_memory_utilization: {value}}}\n")
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4: serving.gpu_memory_utilization" in err and rule in err
