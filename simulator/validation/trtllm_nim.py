"""NVIDIA NIM 1.8.0 (TensorRT-LLM engines) serving Llama 3.3 70B in FP8 on two H100 at fixed concurrency against the
serving model with the ``tensorrt_llm`` profile: rows for that profile (issue 28 item 1), reported, not gated.

Data: simulator/validation/data/published_trtllm_nim.csv (source, engine, client and what is left out in its
header). Each row is one scenario: ``dgx_h100`` with 2 GPUs, ``tp: 2``, ``precision: fp8``, ``framework:
tensorrt_llm`` (its scheduler, memory rule and limits as shipped), an 8-bit K/V cache (``KV_CACHE_DTYPE``: deduced
from the page's capacity plateaus), ``serving: {input_len, output_len}``, run as AIPerf
ran it: a closed loop of ``concurrency`` requests (:func:`simulator.entries.serve.simulate_closed_loop`, 5 x
concurrency requests, at least 20). Three numbers per row: mean TTFT, mean ITL (the model's mean TPOT) and output
tokens/s. Nothing in the model was derived from these rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from simulator.resources import commented_csv
from simulator.validation import VALIDATION_DATA

DATA = VALIDATION_DATA / "published_trtllm_nim.csv"
#: meta-llama/Llama-3.3-70B-Instruct config.json
LLAMA33_70B = dict(name="llama-3.3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256,
                   activation="swiglu", norm="rmsnorm", tied_embeddings=False)
FRAMEWORK = "tensorrt_llm"
#: The engine's K/V cache element type: 8-bit. Not stated on the page, but its own capacity plateaus (rows left out of
#: scoring) rule out a 16-bit cache: 5000/500 at concurrency 100-250 runs ~920 tok/s at ~93 ms ITL, about 86
#: sequences decoding at once, and 20000/2000 at 25-250 ~420 tok/s at ~49.5 ms, about 21; with their whole lengths
#: (5500, 22000 tokens) that is ~470K and ~460K cached tokens, which at 16 bits (80 layers x 2 x 4 K/V heads per GPU x
#: 128 x 2 B = 163,840 B a token per GPU) is ~77 GB a GPU beside 34 GB of FP8 weights on an 80 GB H100; at 8 bits it
#: is ~38 GB. A deduction from the page, not a fit (tests/validation/test_trtllm_nim.py
#: ``test_page_capacity_rules_out_a_16_bit_cache``; docs/engine_kernels/trtllm_nim.md, h62).
KV_CACHE_DTYPE = "fp8"
METRICS = ("ttft", "itl", "throughput")


@dataclass(frozen=True)
class NimRow:
    input_len: int
    output_len: int
    concurrency: int
    published: tuple[float, float, float]     # TTFT (s), ITL (s), output tokens/s
    predicted: tuple[float, float, float]

    @property
    def errors(self) -> tuple[float, float, float]:
        return tuple(p / q - 1.0 for p, q in zip(self.predicted, self.published, strict=True))


def published_rows() -> list[dict]:
    return commented_csv(DATA)


def scenario_for(input_len: int, output_len: int) -> dict:
    return {"name": f"nim-llama33-70b-h100-tp2-{input_len}-{output_len}",
            "system": {"profile": "dgx_h100", "nodes": 1, "gpus": 2}, "model": dict(LLAMA33_70B), "parallel": {"tp": 2},
            "training": {"mode": "inference", "precision": "fp8", "kv_cache_dtype": KV_CACHE_DTYPE,
                         "framework": FRAMEWORK},
            "serving": {"batch": 1, "input_len": input_len, "output_len": output_len, "num_requests": 20}}


def predict(input_len: int, output_len: int, concurrency: int) -> tuple[float, float, float]:
    """(mean TTFT s, mean ITL s, output tokens/s) of the closed loop at ``concurrency``."""
    from simulator.entries.serve import simulate_closed_loop
    from simulator.scenario import load_scenario

    m = simulate_closed_loop(load_scenario(scenario_for(input_len, output_len)), concurrency, max(20, 5 * concurrency))
    return m["ttft_mean_s"], m["tpot_mean_s"], m["tokens_per_s"]


def pool_tokens(kv_cache_dtype: str | None = KV_CACHE_DTYPE) -> int:
    """Tokens the modelled engine's K/V pool holds on each GPU for the NIM scenario (the profile's memory rule), with
    the cache element type ``kv_cache_dtype`` (None: the scenario default, 16-bit)."""
    from simulator.entries.serve import serving_context
    from simulator.scenario import load_scenario
    from simulator.serving.loop_inputs import loop_limits

    spec = scenario_for(1000, 1000)
    spec["training"]["kv_cache_dtype"] = kv_cache_dtype
    scenario = load_scenario(spec)
    ctx, memory = serving_context(scenario)
    limits = loop_limits(ctx, scenario.plan, memory)
    return limits.kv_blocks * limits.block_tokens


def wave_ttfts(input_len: int, output_len: int, concurrency: int, request_s: float) -> list[list[float]]:
    """Each request's TTFT (s), one list per wave of ``concurrency`` requests (5 waves), of the closed loop with the
    scenario's step prices and the API server's per-request time set to ``request_s``
    (``serving.host.request_s``): how a per-request stagger changes the waves (docs/engine_host.md,
    "Closed-loop clients")."""
    from dataclasses import replace

    import numpy as np

    from simulator.entries.serve import serving_context
    from simulator.scenario import load_scenario
    from simulator.serving.loop import run_loop
    from simulator.serving.loop_inputs import loop_costs, loop_limits

    scenario = load_scenario(scenario_for(input_len, output_len))
    ctx, memory = serving_context(scenario)
    costs = replace(loop_costs(ctx, scenario.plan), request_s=request_s)
    run = run_loop(np.zeros(concurrency), input_len, output_len, costs, loop_limits(ctx, scenario.plan, memory),
                   refill=4 * concurrency)
    ttft = run.first_token_s - run.arrival_s
    return [ttft[w:w + concurrency].tolist() for w in range(0, 5 * concurrency, concurrency)]


def nim_rows(max_concurrency: int | None = None) -> list[NimRow]:
    out = []
    for r in published_rows():
        isl, osl, c = int(r["input_len"]), int(r["output_len"]), int(r["concurrency"])
        if max_concurrency is not None and c > max_concurrency:
            continue
        pub = (float(r["ttft_ms"]) / 1e3, float(r["itl_ms"]) / 1e3, float(r["output_tokens_per_s"]))
        out.append(NimRow(isl, osl, c, pub, predict(isl, osl, c)))
    return out


def summary(rows: list[NimRow]) -> dict:
    """Per metric: how many rows within 10% and the median error."""
    return {m: {"within_10pct": sum(abs(r.errors[i]) <= 0.10 for r in rows),
                "median_error": statistics.median(r.errors[i] for r in rows)} for i, m in enumerate(METRICS)}
