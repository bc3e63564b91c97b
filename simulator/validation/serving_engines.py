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

import csv
import statistics
from pathlib import Path

DATA = Path(__file__).parent / "data" / "published_engines.csv"


#: gpt-oss-120b's checkpoint: experts in MXFP4, attention, router, embedding and LM head in bf16
#: (huggingface.co/openai/gpt-oss-120b config.json quantization_config; simulator/model/quantization.py)
CHECKPOINT = {"format": "mxfp4", "modules": "experts"}


def engine_scenario(r: dict) -> dict:
    """The row's setup as a scenario mapping. Without expert parallelism (none of the rows enables it) the engines
    shard each expert's intermediate dimension over the TP ranks: ``etp`` = ``tp`` (SGLang's FusedMoE:
    intermediate_size_per_partition = intermediate_size // tp_size with ep_size 1; vLLM's FusedMoE likewise unless
    ``--enable-expert-parallel``, docs.vllm.ai v0.10.1.1 serving/expert_parallel_deployment)."""
    tp = int(r["tp"])
    serving: dict = {"batch": 1, "input_len": int(r["input_len"]), "output_len": int(r["output_len"]),
                     "num_requests": max(20, int(r["num_requests"]))}
    if r["gpu_memory_utilization"]:
        serving["gpu_memory_utilization"] = float(r["gpu_memory_utilization"])
    return {"name": r["id"], "system": {"profile": "dgx_h100", "nodes": 1, "gpus": tp},
            "model": {"preset": "gpt-oss-120b", "weight_quantization": CHECKPOINT}, "parallel": {"tp": tp, "ep": 1, "etp": tp},
            "training": {"mode": "inference", "precision": "fp4", "framework": r["engine"]}, "serving": serving}


def _model_value(r: dict) -> float:
    from simulator.entries.serve import simulate_bench, simulate_closed_loop
    from simulator.scenario import load_scenario

    scenario = load_scenario(engine_scenario(r))
    if r["metric"] == "tpot_s":
        return simulate_closed_loop(scenario, int(r["concurrency"]), int(r["num_requests"]))["tpot_mean_s"]
    b = simulate_bench(scenario)
    return b["request_throughput"] * int(r["input_len"]) + b["output_tokens_per_s"]


def engine_rows() -> list[dict]:
    """Each published number with the model's value for its scenario and the error (model / published - 1)."""
    lines = [ln for ln in DATA.read_text().splitlines() if ln and not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        model, published = _model_value(r), float(r["published"])
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
    Little's law on the decode steps; prefill stalls are inside the mean ITL). Beside it the modelled decode step at
    the published concurrency (context: the input plus half the output) against the published median ITL, which
    separates the step's kernels from the admission of requests (docs/engine_kernels.md)."""
    from simulator.entries.serve import simulate_bench, simulate_serving
    from simulator.scenario import load_scenario

    rows = {r["id"]: r for r in csv.DictReader(
        ln for ln in DATA.read_text().splitlines() if ln and not ln.startswith("#"))}
    out = []
    for p in csv.DictReader(ln for ln in LATENCY.read_text().splitlines() if ln and not ln.startswith("#")):
        r = rows[p["id"]]
        published = float(p["output_tokens_per_s"]) * float(p["mean_itl_s"])
        b = simulate_bench(load_scenario(engine_scenario(r)))
        at = engine_scenario(r)
        at["serving"].update(batch=max(1, round(published)), input_len=int(r["input_len"]) + int(r["output_len"]) // 2,
                             output_len=2)
        step = simulate_serving(load_scenario(at)).decode.step_s
        out.append({"id": p["id"], "engine": r["engine"], "published_concurrency": published,
                    "model_concurrency": b["output_tokens_per_s"] * b["itl_s"]["mean"],
                    "published_median_itl_s": float(p["median_itl_s"]), "model_step_at_published_s": step})
    return out
