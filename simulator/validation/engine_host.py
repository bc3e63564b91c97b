"""The engines' host time per step (``serving.host``, docs/engine_host.md), calibrated on a published host-bound row
that is NOT a validation row: vLLM's own V1 online-serving benchmark of a 1B model (vllm-project/vllm pull request
#12287, "[Frontend][V1] Online serving performance improvements", its "Before" run, January 2025).

The row: ``VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.2-1B-Instruct --max-num-batched-tokens 8192
--no-enable-prefix-caching`` on one A100, ``benchmark_serving.py --dataset-name sharegpt --ignore-eos --num-prompts
6000 --request-rate inf --max-concurrency 400``: 1,350,511 input and 1,211,959 generated tokens in 94.31 s (12,850.45
output tokens/s). A 1B model's GPU step at 400 sequences is a few milliseconds, so most of each step is the host's.

Calibration: the same run through the serving loop (the ``vllm`` profile, Llama-3.2-1B's shape from its Hugging Face
config.json, mean lengths 225 / 202, a closed loop of 400) with ``serving.host.seq_s`` bisected until the modelled
output rate equals the published one. Everything the row's host spends per scheduled sequence and step (the engine
core's scheduling, input preparation, sampling and output processing, and the frontend's detokenization and
streaming) is attributed to ``seq_s``, added to the GPU step (vLLM V1 without async scheduling); the one row cannot
separate a per-step constant (``step_s``) or the frontend's share (``token_s``), so both stay 0.
"""

from __future__ import annotations

#: the published row (vllm-project/vllm#12287, "Before"; one A100, vLLM V1 of January 2025)
ROW = {"input_tokens": 1_350_511, "output_tokens": 1_211_959, "requests": 6000, "concurrency": 400,
       "duration_s": 94.31, "output_tokens_per_s": 12_850.45}

#: meta-llama/Llama-3.2-1B-Instruct config.json: 16 layers, hidden 2048, 32 heads, 8 K/V heads, FFN 8192, vocabulary
#: 128,256, tied embeddings, SwiGLU, RMSNorm
LLAMA_32_1B = {"name": "llama-3.2-1b", "layers": 16, "hidden": 2048, "heads": 32, "kv_heads": 8, "ffn_hidden": 8192,
               "vocab": 128256, "activation": "swiglu", "norm": "rmsnorm", "tied_embeddings": True}


#: every host price off but the one calibrated (the profile's own values must not leak into their calibration)
QUIET = {"step_s": 0.0, "seq_s": 0.0, "token_s": 0.0, "request_s": 0.0, "overlap": False}


def calibration_scenario(value: float, field: str = "token_s") -> dict:
    """The row as a scenario with ``serving.host.<field>`` = ``value`` (mean lengths: its token totals / requests)."""
    return {"name": "vllm-pr12287-before", "system": {"profile": "dgx_a100_80gb", "nodes": 1, "gpus": 1},
            "model": LLAMA_32_1B, "parallel": {"tp": 1},
            "training": {"mode": "inference", "precision": "bf16", "framework": "vllm"},
            "serving": {"batch": 1, "input_len": round(ROW["input_tokens"] / ROW["requests"]),
                        "output_len": round(ROW["output_tokens"] / ROW["requests"]), "num_requests": ROW["requests"],
                        "host": {**QUIET, field: value}}}


def output_rate(value: float, field: str = "token_s") -> float:
    """Modelled output tokens/s of the row's closed loop with ``serving.host.<field>`` = ``value``."""
    from simulator.entries.serve import simulate_closed_loop
    from simulator.scenario import load_scenario

    r = simulate_closed_loop(load_scenario(calibration_scenario(value, field)), ROW["concurrency"], ROW["requests"])
    return r["tokens_per_s"]


def calibrate(field: str = "token_s", low: float = 0.0, high: float = 200e-6, steps: int = 14) -> float:
    """The value (s) of ``serving.host.<field>`` at which the modelled output rate equals the row's (bisection; the
    rate falls as it rises)."""
    for _ in range(steps):
        mid = (low + high) / 2
        if output_rate(mid, field) > ROW["output_tokens_per_s"]:
            low = mid
        else:
            high = mid
    return (low + high) / 2
