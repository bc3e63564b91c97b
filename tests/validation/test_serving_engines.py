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
#: gpu_memory_utilization (preemption by recompute of 32k-token prompts; docs/engine_kernels.md), not a fit
#: (h40) then the vLLM and TensorRT-LLM rows when their profiles took the engines' start-up profiling peak
#: (serving.scheduler.profile_forward: a bf16 forward of 8192 tokens, 0.47 GB, and vLLM's sampler run, 1024 x 201088
#: x 6 B = 1.24 GB): random_2k 0.863 -> 0.778, random_4k 0.775 -> 0.686, random_32k 0.212 -> 1.101 (knife edge,
#: above), sharegpt 1.530 -> 1.541, trtllm 6.769 -> 6.772
PINNED = {"vllm_random_2k": 0.778, "vllm_random_4k": 0.686, "vllm_random_32k": 1.101, "vllm_random_128": 1.208,
          "vllm_sharegpt": 1.541, "vllm_sharegpt_c4_tpot": -0.033, "vllm_sharegpt_tp2": 1.329,
          "vllm_sharegpt_tp4": 1.144, "sglang_sharegpt": 4.736, "trtllm_sharegpt": 6.772}


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
    assert s["median_abs_error"] == pytest.approx(1.176, abs=0.005)
    assert s["per_engine"] == pytest.approx({"sglang": 4.736, "tensorrt_llm": 6.772, "vllm": 1.122}, abs=0.005)
