"""Serving model against measurements: the H200 decode/prefill sweep of a Llama-3-8B-shaped model
(simulator/validation/data/h200_serve, benchmarks/device/serve_decode.py) and published serving benchmarks
(simulator/validation/data/published_serving.csv).

The measured sweep is predicted with the benchmark's own kernel set (``kernels: torch_eager``, ``attention:
torch_sdpa``): the component rates come from the per-op rows of the same session (``ops.jsonl``: isolated GEMMs,
attention kernels), from earlier GEMM measurements and, for the memory-bound kernels, from isolated rows at another
shape (``h200_prefill_ops``, :mod:`simulator.validation.prefill_ops`), never from these end-to-end rows. The host launch time
(``cuda_graphs: false``) is taken from the batch-1, 1K row, which is therefore left out of the eager validation.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.resources import commented_csv

DATA = Path(__file__).parent / "data" / "h200_serve"
#: the eager row host_launch_s was derived from (simulator/serving/backends.py)
HOST_CALIBRATION_ROW = (1, 1024)


def h200_scenario(batch: int, input_len: int, output_len: int = 1, *, graphs: bool = True, tp: int = 1) -> dict:
    """The benchmark's setup as a scenario mapping: Llama-3-8B on H200, plain PyTorch kernels."""
    return {"name": "h200-serve-decode", "system": {"profile": "hgx_h200", "gpus": tp},
            "model": {"preset": "llama3-8b"}, "parallel": {"tp": tp},
            "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": batch, "input_len": input_len, "output_len": output_len, "cuda_graphs": graphs,
                        "kernels": "torch_eager", "attention": "torch_sdpa"}}


@dataclass(frozen=True)
class Row:
    kind: str
    batch: int
    tokens: int
    graphs: bool
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def h200_rows(file: str = "serve.jsonl") -> list[Row]:
    """Every decode and prefill row of one run with the model's prediction."""
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario

    rows = []
    for line in (DATA / file).read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "decode":
            # the step writes the new token at position context - 1: past = context - 1 cached tokens
            res = simulate_serving(load_scenario(h200_scenario(r["batch"], r["context"] - 1, graphs=r["cuda_graph"],
                                                               tp=r.get("tp", 1))))
            rows.append(Row("decode", r["batch"], r["context"], r["cuda_graph"], r["time_s"], res.decode.step_s))
        elif r["kind"] == "prefill":
            res = simulate_serving(load_scenario(h200_scenario(r["seqs"], r["tokens"], tp=r.get("tp", 1))))
            rows.append(Row("prefill", r["seqs"], r["tokens"], False, r["time_s"], res.prefill.step_s))
    return rows


def median_abs_error(rows: list[Row]) -> float:
    return statistics.median(abs(r.error) for r in rows)


PUBLISHED = DATA.parent / "published_serving.csv"
#: tolerance of the published serving rows (the issue's target)
PUBLISHED_TOLERANCE = 0.20


def _published_scenario(r: dict) -> dict:
    model: dict = {"preset": r["model"]}
    if r["experts"]:
        from simulator.model import load_model_preset

        moe = load_model_preset(r["model"]).moe.model_dump()
        model["moe"] = {**moe, "experts": int(r["experts"])}
    system = {"profile": r["profile"], "nodes": int(r["nodes"])}
    if r["gpus"]:
        system["gpus"] = int(r["gpus"])
    moe_model = bool(r["experts"])
    serving = {"batch": int(r["batch"]), "input_len": int(r["input_len"]), "output_len": int(r["output_len"])}
    if r["concurrency"]:
        serving["concurrency"] = [int(c) for c in r["concurrency"].split(";")]
    for key in ("max_batched_tokens", "max_num_seqs"):
        if r.get(key):
            serving[key] = int(r[key])
    if moe_model:
        serving.update(expert_kernel="deepgemm", all2all_backend="deepep_low_latency")
        system["net_issue"] = "ibgda"
    return {"name": r["id"], "system": system, "model": model, "parallel": {"tp": int(r["tp"]), "ep": int(r["ep"])},
            "training": {"mode": "inference", "precision": r["precision"]}, "serving": serving}


def published_serving_rows() -> list[dict]:
    """Each published serving number with the model's value for the same setup (metric definitions in the CSV)."""

    from simulator.entries.serve import simulate_closed_loop, simulate_serving
    from simulator.scenario import load_scenario

    out = []
    for r in commented_csv(PUBLISHED):
        scenario = load_scenario(_published_scenario(r))
        if r["metric"] == "throughput_ratio_loop":  # the benchmark's closed loop through the serving loop
            first, last = (simulate_closed_loop(scenario, int(c), int(c) * int(r["prompts_per_concurrency"]))
                           for c in r["concurrency"].split(";"))
            model = last["tokens_per_s"] / first["tokens_per_s"]
            out.append(_row(r, model))
            continue
        res = simulate_serving(scenario)
        if r["metric"] == "tpot_s":  # mean decode step over the output_len steps
            model = res.tpot_s
        elif r["metric"] == "throughput_ratio":
            first, last = res.curve[0], res.curve[-1]
            model = last["tokens_per_s"] / first["tokens_per_s"]
        else:  # tokens_per_s_per_node: every DP rank decodes ``batch`` sequences with input_len cached tokens
            gpus_per_node = res.gpus / int(r["nodes"])
            model = gpus_per_node * int(r["batch"]) / res.decode.step_s
        out.append(_row(r, model))
    return out


def _row(r: dict, model: float) -> dict:
    published = float(r["published"])
    return {"id": r["id"], "metric": r["metric"], "unit": r["unit"], "published": published, "model": model,
            "error": model / published - 1}
