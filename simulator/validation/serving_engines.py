"""Published engine benchmarks (simulator/validation/data/published_engines.csv; sources, commands and assumptions in
its header), each expressed as one scenario on the engine's profile (``training.framework``: its scheduler, memory
rule and limits; simulator/serving/scheduler.py) and run as the benchmark ran: every request at t = 0 through
``simulator serve --bench`` (:func:`simulator.entries.serve.simulate_bench`), or a closed loop of ``concurrency``
requests (:func:`simulator.entries.serve.simulate_closed_loop`) for a TPOT row.

Metrics: ``total_tokens_per_s`` = requests x (input + output tokens) / duration (vLLM ``bench serve``'s "Total Token
throughput"); ``tpot_s`` = mean TPOT. The errors are reported (docs/engine_schedulers.md), never fitted: no number
of the model was derived from these rows.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from simulator.caching import memo
from simulator.resources import commented_csv

DATA = Path(__file__).parent / "data" / "published_engines.csv"


#: gpt-oss-120b's checkpoint: experts in MXFP4, attention, router, embedding and LM head in bf16
#: (huggingface.co/openai/gpt-oss-120b config.json quantization_config; simulator/model/quantization.py)
CHECKPOINT = {"format": "mxfp4", "modules": "experts"}


def engine_scenario(r: dict, mean_lengths: bool = False) -> dict:
    """The row's setup as a scenario mapping. Without expert parallelism (none of the rows enables it) the engines
    shard each expert's intermediate dimension over the TP ranks: ``etp`` = ``tp`` (SGLang's FusedMoE:
    intermediate_size_per_partition = intermediate_size // tp_size with ep_size 1; vLLM's FusedMoE likewise unless
    ``--enable-expert-parallel``, docs.vllm.ai v0.10.1.1 serving/expert_parallel_deployment). A row with a
    ``lengths_csv`` (the ShareGPT rows: simulator/validation/sharegpt_sample.py) takes its per-request lengths
    through ``serving.workload.lengths_csv``, as a user would; ``mean_lengths`` gives every request the mean
    lengths (``input_len`` / ``output_len``) instead, the comparison the rows were scored with before."""
    tp = int(r["tp"])
    serving: dict = {"batch": 1, "input_len": int(r["input_len"]), "output_len": int(r["output_len"]),
                     "num_requests": max(20, int(r["num_requests"]))}
    if r["gpu_memory_utilization"]:
        serving["gpu_memory_utilization"] = float(r["gpu_memory_utilization"])
    if r.get("async_scheduling"):  # vllm serve --async-scheduling: the host's step work under the GPU's
        serving["host"] = {"overlap": True}
    if r.get("lengths_csv") and not mean_lengths:
        serving["workload"] = {"lengths_csv": str(DATA.parent / r["lengths_csv"])}
    return {"name": r["id"], "system": {"profile": "dgx_h100", "nodes": 1, "gpus": tp},
            "model": {"preset": "gpt-oss-120b", "weight_quantization": CHECKPOINT}, "parallel": {"tp": tp, "ep": 1, "etp": tp},
            "training": {"mode": "inference", "precision": "fp4", "framework": r["engine"]}, "serving": serving}


def _mean_input(r: dict, mean_lengths: bool) -> float:
    """Prompt tokens per request of the row's scenario (the lengths file's mean where it has one)."""
    if r.get("lengths_csv") and not mean_lengths:
        from simulator.validation.sharegpt_sample import read_sample

        sample = read_sample(DATA.parent / r["lengths_csv"])
        return sum(p for p, *_ in sample) / len(sample)
    return int(r["input_len"])


@memo(maxsize=32, loaded=True)
def _bench(rid: str, mean_lengths: bool) -> dict:
    """The ``simulate_bench`` result of row ``rid``'s scenario, read from the rows' file (``loaded``: the row id and
    the lengths choice key the whole input; engine_rows and decode_concurrency share the runs). Do not mutate."""
    from simulator.entries.serve import simulate_bench
    from simulator.scenario import load_scenario

    return simulate_bench(load_scenario(engine_scenario(_row(rid), mean_lengths)))


def _model_value(r: dict, mean_lengths: bool = False) -> float:
    from simulator.entries.serve import simulate_closed_loop
    from simulator.scenario import load_scenario

    if r["metric"] == "tpot_s":
        scenario = load_scenario(engine_scenario(r, mean_lengths))
        return simulate_closed_loop(scenario, int(r["concurrency"]), int(r["num_requests"]))["tpot_mean_s"]
    b = _bench(r["id"], mean_lengths)
    return b["request_throughput"] * _mean_input(r, mean_lengths) + b["output_tokens_per_s"]


def _rows() -> list[dict]:
    return commented_csv(DATA)


def engine_rows(mean_lengths: bool = False, ids: tuple[str, ...] | None = None) -> list[dict]:
    """Each published number (of ``ids``, or every row) with the model's value for its scenario and the error (model
    / published - 1); ``mean_lengths``: every request at the row's mean lengths (:func:`engine_scenario`)."""
    out = []
    for r in _rows():
        if ids is not None and r["id"] not in ids:
            continue
        model, published = _model_value(r, mean_lengths), float(r["published"])
        out.append({"id": r["id"], "engine": r["engine"], "metric": r["metric"], "unit": r["unit"],
                    "published": published, "model": model, "error": model / published - 1})
    return out


def summary(rows: list[dict]) -> dict:
    """Median absolute error over every row and per engine."""
    engines = sorted({r["engine"] for r in rows})
    return {"median_abs_error": statistics.median(abs(r["error"]) for r in rows),
            "per_engine": {e: statistics.median(abs(r["error"]) for r in rows if r["engine"] == e) for e in engines}}


LATENCY = Path(__file__).parent / "data" / "published_engines_latency.csv"


def decode_concurrency() -> list[dict]:
    """Sequences decoding at once, published and modelled, for the rows of ``published_engines_latency.csv``:
    output tokens/s x mean ITL (each running sequence gains one token per step, so tokens/s = running / step time:
    Little's law on the decode steps; prefill stalls are inside the mean ITL). Beside it the modelled decode step
    (the GPU's: no ``serving.host`` time) at the published concurrency (context: the input plus half the output)
    against the published median ITL, which separates the step's kernels from the admission of requests
    (docs/engine_kernels/gpustack_errors.md). The model's concurrency with the row's sampled lengths (as scored) and
    with every request at the mean lengths."""
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario

    rows = {r["id"]: r for r in _rows()}
    out = []
    for p in commented_csv(LATENCY):
        r = rows[p["id"]]
        published = float(p["output_tokens_per_s"]) * float(p["mean_itl_s"])
        b, flat = _bench(r["id"], False), _bench(r["id"], True)
        at = engine_scenario(r, mean_lengths=True)
        at["serving"].update(batch=max(1, round(published)), input_len=int(r["input_len"]) + int(r["output_len"]) // 2,
                             output_len=2)
        step = simulate_serving(load_scenario(at)).decode.step_s
        out.append({"id": p["id"], "engine": r["engine"], "published_concurrency": published,
                    "model_concurrency": b["output_tokens_per_s"] * b["itl_s"]["mean"],
                    "model_concurrency_mean_lengths": flat["output_tokens_per_s"] * flat["itl_s"]["mean"],
                    "published_median_itl_s": float(p["median_itl_s"]), "model_step_at_published_s": step})
    return out


#: How GPUStack's client ran every row (gpustack/gpustack/docs/performance-lab/gpt-oss-120b/h100.md @ 72aee9dd195f,
#: "Benchmark Script"): ``vllm bench serve --backend openai-chat --endpoint /v1/chat/completions`` with
#: ``--num-prompts`` N and neither ``--request-rate`` (default inf: every request sent at t = 0) nor
#: ``--max-concurrency`` (default None), but the c4 row. Without ``--max-concurrency`` the client holds no cap on
#: requests in flight: its aiohttp connector is built with ``limit=max_concurrency or 0`` (0 = unlimited; vLLM
#: ``vllm/benchmarks/serve.py``) and its semaphore only when the flag is given. So the 135 / 44 / 103 sequences
#: decoding at once are the engines' admission, not the client's. ShareGPT requests are vLLM's sampler's: the
#: conversation's first turn as the prompt, the second turn's token count as ``max_completion_tokens``, kept only
#: when the prompt has 4-1024 tokens and prompt + output at most 2048 (``is_valid_sequence`` in
#: ``vllm/benchmarks/datasets.py``). The per-request lengths are not published (only their totals); the rows take a
#: sample drawn the same way from Vidur's ShareGPT trace (simulator/validation/sharegpt_sample.py).
CLIENT = {"tool": "vllm bench serve 0.10.2", "request_rate": "inf", "max_concurrency": None,
          "sharegpt_prompt_tokens": (4, 1024), "sharegpt_total_tokens_max": 2048}


def _row(rid: str) -> dict:
    return {r["id"]: r for r in _rows()}[rid]


def _whole_run(scenario: dict) -> dict:
    """Output tokens/s, sequences decoding at once (output tokens/s x mean ITL, as ``decode_concurrency``), mean
    TTFT (s) and total tokens/s of one scenario's benchmark run."""
    from simulator.entries.serve import simulate_bench
    from simulator.scenario import load_scenario

    b = simulate_bench(load_scenario(scenario))
    return {"concurrency": b["output_tokens_per_s"] * b["itl_s"]["mean"], "output_tokens_per_s": b["output_tokens_per_s"],
            "ttft_mean_s": b["ttft_s"]["mean"], "mean_itl_s": b["itl_s"]["mean"], "duration_s": b["duration_s"]}


def length_spread(rid: str, sigmas: tuple[float, ...]) -> list[dict]:
    """A SENSITIVITY, not a row: the row's requests with lognormal input and output lengths of the same means (median
    = mean x exp(-sigma^2 / 2)) instead of the mean lengths. With every request sent at t = 0 the run lasts until the
    longest requests finish, so a spread of lengths lowers the whole-run concurrency and output rate (the drain tail)
    and raises the cache a running sequence holds on average. The sigmas are illustrations (h42, before the rows had
    a ShareGPT sample); vLLM's sampler cuts prompts at 1024 and prompt + output at 2048 tokens (CLIENT), which a
    lognormal does not."""
    r = _row(rid)
    out = []
    for s in sigmas:
        sc = engine_scenario(r, mean_lengths=True)
        if s:
            sc["serving"]["workload"] = {side: {"distribution": "lognormal", "median": mean * math.exp(-s * s / 2),
                                                "sigma": s}
                                         for side, mean in (("input", int(r["input_len"])), ("output", int(r["output_len"])))}
        out.append({"sigma": s, **_whole_run(sc)})
    return out


def cache_to_match(rid: str, target: float, low: float, high: float, steps: int = 12,
                   mean_lengths: bool = True) -> dict:
    """A DIAGNOSTIC, not a fit (no row uses it): the ``serving.gpu_memory_utilization`` (bisected over [low, high],
    ``steps`` halvings) at which the modelled whole-run concurrency of the row, with its mean lengths (or, with
    ``mean_lengths`` False, its sampled ones), falls to ``target`` (the published one); beside it the cache that
    leaves, in full-equivalent tokens, and the run there."""
    from simulator.entries.serve import serving_context
    from simulator.errors import UserError
    from simulator.scenario import load_scenario
    from simulator.serving.loop_inputs import loop_limits

    r = _row(rid)

    def at(u: float) -> dict:
        sc = engine_scenario(r, mean_lengths)
        sc["serving"]["gpu_memory_utilization"] = u
        return sc

    def concurrency(u: float) -> float:
        try:
            return _whole_run(at(u))["concurrency"]
        except UserError:  # a cache that holds not one request: nothing runs
            return 0.0

    for _ in range(steps):
        mid = (low + high) / 2
        if concurrency(mid) > target:
            high = mid
        else:
            low = mid
    scenario = load_scenario(at(high))
    ctx, memory = serving_context(scenario)
    limits = loop_limits(ctx, scenario.plan, memory)
    return {"gpu_memory_utilization": high, "cache_tokens": limits.kv_blocks * limits.block_tokens,
            **_whole_run(at(high))}
