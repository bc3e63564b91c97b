"""TensorRT-LLM v0.5.0's decoder masked MHA (the ``masked_mha`` decode kernel) timed on one H200 against the serving
model's attention op (docs/engine_kernels/trtllm_v0_5.md; simulator/validation/data/h200_masked_mha/README.md).

Each measured row is one decode step's attention launch of one layer (benchmarks/device/trtllm_mmha_bench.cu: the
kernel built from NVIDIA/TensorRT-LLM release/0.5.0, a contiguous cache, Llama 2's shapes at the launch blog's
batches and contexts, 16-bit or FP8 e4m3 cache), the median of 7 reps of back-to-back launches, two runs averaged.
The model (:data:`simulator.serving.backends.ATTENTION_KERNELS` ``masked_mha``) prices it as

    launch + max(unique K/V bytes / (e_c x HBM), CTAs x cta_s + K/V elements per query head / element_rate)

with ``e_c`` the HBM read efficiency by cache element size (16-bit, 8-bit: the 8-bit path issues 8-byte loads where
the 16-bit path issues 16-byte ones, seen in the SASS), CTAs = sequences x query heads, and the elements counted once
per query head (a GQA group's repeated reads come from the L2: measured, the per-query-head rate exceeds HBM). Four
constants, fitted (least squares on log time, :func:`fit`) on the fp16-query rows of each blog row's first and last
decode step (:func:`calibration`); the middle steps validate them. The bf16-query rows (the kernel is ~1.5x slower
there) are kept in the data, not modelled: TensorRT-LLM v0.5's benchmarks and llama build default to float16.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from simulator.caching import memo

DATA = Path(__file__).parent / "data" / "h200_masked_mha" / "mmha.jsonl"
#: the query dtype the model's constants describe (TensorRT-LLM v0.5 NVIDIA/TensorRT-LLM/benchmarks/python/benchmark.py and
#: examples/llama/build.py: --dtype default float16)
QUERY_DTYPE = "fp16"
HEAD_DIM = 128


@dataclass(frozen=True)
class MmhaRow:
    model: str
    heads: int
    kv_heads: int
    batch: int
    input_len: int
    max_len: int
    cached: int
    cache_dtype: str
    measured_s: float
    unique_bytes: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def element_bytes(self) -> int:
        return 1 if self.cache_dtype == "fp8_e4m3" else 2

    @property
    def calibration(self) -> bool:
        """The first and last decode step of a blog row."""
        return is_calibration(self.cached, self.input_len, self.max_len)

    @property
    def elements(self) -> float:
        """K and V elements per query head: batch x (cached + 1) keys x heads x 2 x 128."""
        return self.batch * (self.cached + 1) * self.heads * 2 * HEAD_DIM


def measured(query_dtype: str = QUERY_DTYPE, subset: str = "blog") -> list[dict]:
    """The kernel rows of ``query_dtype`` in ``subset`` (``blog``: the launch blog's rows; ``small_batch``: batches
    of 1-16, outside them) with the contiguous cache, each configuration's median averaged over the runs that timed
    it."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    by_key: dict[tuple, list[dict]] = {}
    for r in rows:
        if (r["kind"] == "mmha" and r["q_dtype"] == query_dtype and r.get("set", "blog") == subset
                and r.get("layout", "linear") == "linear"):
            key = (r["model"], r["batch"], r["cached"], r["cache_dtype"])
            by_key.setdefault(key, []).append(r)
    out = []
    for runs in by_key.values():
        out.append(dict(runs[0], t_s_median=statistics.fmean(r["t_s_median"] for r in runs), runs=len(runs)))
    return out


def calibration(rows: list[dict]) -> list[dict]:
    """The rows :func:`fit` fits: each blog row's first and last decode step (:func:`is_calibration`)."""
    return [r for r in rows if is_calibration(r["cached"], r["input_len"], r["max_len"])]


def is_calibration(cached: int, input_len: int, max_len: int) -> bool:
    """A blog row's first decode step (the prompt cached) or its last (every token but the last cached)."""
    return cached in (input_len, max_len - 1)


def fit() -> dict[str, float]:
    """The four constants from the calibration rows: least squares on log(model / measured) (scipy, the ``fit``
    extra; the model never imports it), each row priced by :func:`predict_s` (the serving program and its pricing)
    with the kernel's constants set to the trial values."""
    import numpy as np
    from scipy.optimize import least_squares

    from simulator.serving.backends import ATTENTION_KERNELS

    shipped, cal = ATTENTION_KERNELS["masked_mha"], calibration(measured())

    def residuals(p):
        kernel = replace(shipped, kv_read_efficiency=p[0], kv_read_efficiency_8bit=p[1], element_rate=p[2] * 1e12,
                         cta_s=p[3] * 1e-9)
        return [np.log(predict_s(r, kernel) / r["t_s_median"]) for r in cal]

    p = least_squares(residuals, [0.9, 0.6, 3.5, 10.0]).x
    return {"kv_read_efficiency": float(p[0]), "kv_read_efficiency_8bit": float(p[1]),
            "element_rate": float(p[2]) * 1e12, "cta_s": float(p[3]) * 1e-9}


@memo(maxsize=8)
def _plan(heads: int, kv_heads: int, fp8: bool):
    """A one-layer model of the row's attention shape on one H200 (only its attention op is priced)."""
    from simulator.scenario import load_scenario

    model = {"name": f"mmha-{heads}-{kv_heads}", "layers": 1, "hidden": heads * HEAD_DIM, "heads": heads,
             "kv_heads": kv_heads, "head_dim": HEAD_DIM, "vocab": 32000, "ffn_hidden": 4 * heads * HEAD_DIM,
             "activation": "swiglu", "norm": "rmsnorm"}
    training = {"mode": "inference", "precision": "bf16", "kv_cache_dtype": "fp8" if fp8 else "bf16"}
    return load_scenario({"name": "mmha", "system": {"profile": "hgx_h200", "gpus": 1}, "model": model,
                          "training": training,
                          "serving": {"batch": 1, "input_len": 1, "output_len": 1, "attention": "masked_mha"}})


def predict_s(row: dict, kernel=None) -> float:
    """The model's seconds for the row's launch, through the serving program and its pricing; ``kernel``: the
    :class:`~simulator.serving.backends.AttentionKernel` to price it with (None: the shipped ``masked_mha``)."""
    from simulator.compute.efficiency import default_efficiency
    from simulator.memory.inference import kv_cache_bytes_per_token_layer
    from simulator.plan import Batch
    from simulator.pricing.serving import cache_attention_seconds
    from simulator.program.serving import cache_attention
    from simulator.serving.backends import ATTENTION_KERNELS

    sc = _plan(row["heads"], row["kv_heads"], row["cache_dtype"] == "fp8_e4m3")
    rp, gpu = sc.plan, sc.cluster.node.gpu
    op = cache_attention(rp, Batch(row["batch"], 1, row["cached"]), kv_cache_bytes_per_token_layer(rp),
                         ATTENTION_KERNELS["masked_mha"] if kernel is None else kernel)
    return cache_attention_seconds(op, gpu, default_efficiency(gpu.architecture))


def mmha_rows(subset: str = "blog") -> list[MmhaRow]:
    """``subset``: ``blog`` (fitted and validated) or ``small_batch`` (batches 1-16 at 2048 cached: outside the fitted
    range, reported)."""
    return [MmhaRow(r["model"], r["heads"], r["kv_heads"], r["batch"], r["input_len"], r["max_len"], r["cached"],
                    r["cache_dtype"], r["t_s_median"], r["kv_bytes_unique"], predict_s(r))
            for r in measured(subset=subset)]


def summary() -> dict[str, float]:
    """Median and largest |error| over the validation rows (the middle decode steps), and over all rows."""
    rows = mmha_rows()
    val = [abs(r.error) for r in rows if not r.calibration]
    every = [abs(r.error) for r in rows]
    return {"rows": len(val), "median_abs_error": statistics.median(val), "max_abs_error": max(val),
            "within_10pct": sum(e <= 0.10 for e in val), "all_median_abs_error": statistics.median(every),
            "all_max_abs_error": max(every)}
