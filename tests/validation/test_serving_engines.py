"""Published engine benchmarks (simulator/validation/data/published_engines.csv: GPUStack's gpt-oss-120b on one H100
with vLLM, SGLang and TensorRT-LLM at their defaults), each one scenario on its engine profile, pinned at their honest
errors. They do NOT meet the issue's targets (median within 10%, each engine within 15%); docs/engine_schedulers.md
says why. A change that moves a row must update its pin in the same commit and say so."""

import pytest

from simulator.validation.serving_engines import engine_rows, summary

#: model / published - 1 of each row when pinned (2026-12-04; re-pinned by h37 when sliding-window layers began to
#: read and keep only their 128-token window: every row over 128 tokens of context moved, random_32k from -0.681)
#: (h38) the TP 2 / TP 4 rows re-pinned when their experts were sharded over the TP ranks as the engines shard them
#: (etp = tp; replicated before, their near-matches came from a 2x-slow step cancelling 2x the concurrency), and the
#: SGLang row when its profile's sliding-window cache became full length (SGLang disables its SWA pool for gpt-oss)
#: (h40) every row re-pinned when the scenario took gpt-oss's checkpoint format (model.weight_quantization: experts
#: in MXFP4 at 0.53125 B, the rest bf16; 65.19 GB instead of 65.72 GB at NVFP4 for all): more cache, bf16 attention
#: reads in decode. random_32k moved 1.237 -> 0.212: that row swings between 89 s and 205 s over +-0.5% of
#: gpu_memory_utilization (preemption by recompute of 32k-token prompts; docs/engine_kernels/gpustack_errors.md), not a fit
#: (h40) then the vLLM and TensorRT-LLM rows when their profiles took the engines' start-up profiling peak
#: (serving.scheduler.profile_forward: a bf16 forward of 8192 tokens, 0.47 GB, and vLLM's sampler run, 1024 x 201088
#: x 6 B = 1.24 GB): random_2k 0.863 -> 0.778, random_4k 0.775 -> 0.686, random_32k 0.212 -> 1.101 (knife edge,
#: above), sharegpt 1.530 -> 1.541, trtllm 6.769 -> 6.772
#: (h44) re-pinned when the engines' memory and host time entered the profiles (docs/engine_host.md), neither fitted
#: on these rows: (1) vLLM and SGLang hold 0.5656 B per MXFP4 expert weight on Hopper, not the checkpoint's 0.53125
#: (serving.scheduler.expert_layout_bytes: vLLM's measured 64.38 GiB load, vllm-project/vllm#33155; both keep the
#: original scales beside the swizzled ones), 3.67 GiB less cache on one H100: random_2k 0.778 -> 0.464, random_4k
#: 0.686 -> 0.391, sharegpt 1.541 -> 0.952, sglang 4.736 -> 2.953, random_32k 1.101 -> -0.520 (its knife edge:
#: one more or less 32k-token request preempted); (2) vLLM's API server streams each output token in 68.4 us
#: (serving.host.token_s, calibrated on vllm-project/vllm#12287's Llama-3.2-1B A100 row), a floor under each step:
#: tp2 1.329 -> 0.568, tp4 1.144 -> 0.152 (their GPU steps at ~850 sequences fall under it); the TP 1 steps stay
#: above it, and random_128 (per-request work, not priced) and c4 do not move
#: (h53) re-scored with TensorRT-LLM 1.0's CUDA-graph capture list (serving.cuda_graph_batch_sizes 1-32, 64, 128; other
#: decode batches eager): no row moves. trtllm_sharegpt stays 6.772: its eager floor, 760 kernels x 13.3 us = 10.1 ms,
#: is under its GPU step at every uncaptured batch (30.9 ms at 33 sequences, 49.3 ms at 466); the vLLM and SGLang
#: rows capture every batch as before (docs/engine_kernels/trtllm_1_0.md)
#: (h55b) re-pinned when vLLM's start-up sampler run took FlashInfer's top-k/top-p path (profile_logit_bytes 6 -> 14:
#: its top_k_mask_logits output and softmax probabilities, 2 x 4 B per logit, live with the bf16 logits and their
#: fp32 copy; 1024 x 201088 x 8 B = 1.53 GiB less cache at every TP size; not fitted on these rows, sourced in
#: frameworks/vllm.yaml): random_2k 0.464 -> 0.282, random_4k 0.391 -> 0.288, sharegpt 0.952 -> 0.485, random_32k
#: -0.520 -> -0.513 (its knife edge); random_128, c4 and the TP 2 / TP 4 rows (under the API-server floor) do not move
#: (h72) the five 1000-prompt ShareGPT rows re-pinned when they took a ShareGPT length sample through
#: serving.workload.lengths_csv (simulator/validation/data/sharegpt_gpt_oss_1000.csv: Vidur's trace, vLLM's filter,
#: seed 0, scaled to the published totals; nothing of the rows' results used) instead of every request at the mean
#: lengths: sharegpt 0.485 -> 0.430, tp2 0.568 -> 0.377, tp4 0.152 -> 0.090, sglang 2.953 -> 1.469, trtllm 6.772 ->
#: 5.161 (docs/engine_kernels/gpustack_errors.md, "Scored with ShareGPT lengths"); the mean-length values stay
#: pinned below (PINNED_MEAN_LENGTHS)
PINNED = {"vllm_random_2k": 0.282, "vllm_random_4k": 0.288, "vllm_random_32k": -0.513, "vllm_random_128": 1.208,
          "vllm_sharegpt": 0.430, "vllm_sharegpt_c4_tpot": -0.033, "vllm_sharegpt_tp2": 0.377,
          "vllm_sharegpt_tp4": 0.090, "sglang_sharegpt": 1.469, "trtllm_sharegpt": 5.161}
#: the ShareGPT rows with every request at the mean lengths (215 / 196 tokens; 197 SGLang, 194 TensorRT-LLM): the
#: comparison column, unchanged by h72
PINNED_MEAN_LENGTHS = {"vllm_sharegpt": 0.485, "vllm_sharegpt_tp2": 0.568, "vllm_sharegpt_tp4": 0.152,
                       "sglang_sharegpt": 2.953, "trtllm_sharegpt": 6.772}


def test_published_engine_rows_at_their_pinned_errors(capsys):
    rows = engine_rows()
    s = summary(rows)
    with capsys.disabled():
        print(f"\n{'id':26s}{'engine':14s}{'published':>12s}{'model':>12s}{'error':>9s}")
        for r in rows:
            print(f"{r['id']:26s}{r['engine']:14s}{r['published']:12.4g}{r['model']:12.4g}{r['error']:9.1%}")
        print(f"median |error| {s['median_abs_error']:.1%}; per engine " +
              ", ".join(f"{e} {v:.1%}" for e, v in s["per_engine"].items()))
    assert {r["id"]: r["error"] for r in rows} == pytest.approx(PINNED, abs=0.005)
    assert s["median_abs_error"] == pytest.approx(0.404, abs=0.005)     # 0.499 at the mean lengths
    assert s["per_engine"] == pytest.approx({"sglang": 1.469, "tensorrt_llm": 5.161, "vllm": 0.333}, abs=0.005)


def test_the_sharegpt_rows_at_the_mean_lengths():
    """The comparison column: the same five rows with every request at the mean lengths, as scored before h72."""
    rows = engine_rows(mean_lengths=True, ids=tuple(PINNED_MEAN_LENGTHS))
    assert {r["id"]: r["error"] for r in rows} == pytest.approx(PINNED_MEAN_LENGTHS, abs=0.005)


def test_a_smaller_cache_reproduces_the_vllm_sharegpt_row_shape():
    """(h42) The diagnostic of docs/engine_kernels/gpustack_admission.md: GPUStack's client set no cap
    (serving_engines.CLIENT), so the 135 sequences vLLM decoded at once (2901.05 tok/s x 46.65 ms mean ITL, its printed
    output) are the engine's. The modelled run reaches them at gpu_memory_utilization 0.876 instead of 0.9 (0.811
    before h44 modelled vLLM's MXFP4 expert layout, 3.67 GiB, 0.856 before h55b's FlashInfer sampler run, 1.53 GiB:
    the gap is 1.92 GiB, 0.0241 x 79.65 GiB, no longer 7.1 or 3.5), a cache of 30,864 full-equivalent tokens (x 73,728 B = 36 layers x 2 x 8 K/V heads x 64 x 2 B: 2.10 GiB); there
    its TTFT, ITL and duration land near the published 24.8 s, 46.65 ms and 67.4 s, which the modelled cache misses
    (11.6 s, 59.7 ms, 34.5 s). A diagnostic, not a fit: no row uses it."""
    from simulator.validation.serving_engines import cache_to_match

    published = 2901.05 * 0.04665
    m = cache_to_match("vllm_sharegpt", published, 0.86, 0.89, steps=5)   # [0.5, 0.9] in 12 steps: 0.8757
    assert m["gpu_memory_utilization"] == pytest.approx(0.8759, abs=0.001)
    assert m["cache_tokens"] == pytest.approx(30_864, rel=0.02)
    assert m["cache_tokens"] * 73_728 / 2**30 == pytest.approx(2.10, abs=0.05)
    assert m["concurrency"] == pytest.approx(published, rel=0.02)
    assert m["ttft_mean_s"] == pytest.approx(32.0, rel=0.02)        # published 24.83 s
    assert m["mean_itl_s"] == pytest.approx(0.0532, rel=0.02)       # published 0.04665 s
    assert m["duration_s"] == pytest.approx(76.9, rel=0.02)         # published 67.40 s


def test_with_sharegpt_lengths_one_smaller_cache_gives_the_vllm_rows_whole_shape():
    """(h72) The same diagnostic with the rows' ShareGPT length sample (as scored): the published 135 sequences at
    once come at gpu_memory_utilization 0.880 ([0.5, 0.9] in 12 steps: 0.88008, 35,664 tokens), a cache of 35,680
    full-equivalent tokens at 0.8801 (x 73,728 B = 2.45 GiB), and there the output rate, mean TTFT, mean ITL and
    duration are all within 2.5% of the published 2901 tok/s, 24.83 s, 46.65 ms and 67.40 s (with the mean lengths,
    at their own match: -12%, +30%, +14%, +14%). The
    memory left to explain: (0.9 - 0.880) x 79.65 GiB = 1.59 GiB. A diagnostic, not a fit: no row uses it."""
    from simulator.validation.serving_engines import cache_to_match

    published = 2901.05 * 0.04665
    m = cache_to_match("vllm_sharegpt", published, 0.8796, 0.8806, steps=1, mean_lengths=False)
    assert m["gpu_memory_utilization"] == pytest.approx(0.8801, abs=0.0005)
    assert m["cache_tokens"] == pytest.approx(35_680, rel=0.02)
    assert m["concurrency"] == pytest.approx(published, rel=0.02)
    assert m["output_tokens_per_s"] == pytest.approx(2842, rel=0.02)  # published 2901.05
    assert m["ttft_mean_s"] == pytest.approx(25.29, rel=0.02)         # published 24.83 s
    assert m["mean_itl_s"] == pytest.approx(0.04772, rel=0.02)        # published 0.04665 s
    assert m["duration_s"] == pytest.approx(68.81, rel=0.02)          # published 67.40 s


def test_a_spread_of_lengths_lowers_the_whole_run_concurrency():
    """(h42) Same mean lengths, lognormal spread: with every request at t = 0 the run lasts until the longest
    finish. sigma 0 is the row as scored (decode_concurrency's 247 sequences; 508 before h44's expert layout, 338
    before h55b's FlashInfer sampler run); sigma 1 (an illustration, ShareGPT's sampled lengths are not published)
    gives 143, while its mean TTFT (12.4 s)
    stays far below the published 24.8 s: the spread alone does not make the queue the engine had."""
    from simulator.validation.serving_engines import length_spread

    flat, wide = length_spread("vllm_sharegpt", (0.0, 1.0))
    assert flat["concurrency"] == pytest.approx(247.5, rel=0.01)
    assert wide["concurrency"] == pytest.approx(143.2, rel=0.01)
    assert wide["ttft_mean_s"] == pytest.approx(12.37, rel=0.02)
