"""PyTorch SDPA decode by call form on one H200 against the serving model's attention op (docs/serving/sdpa.md;
simulator/validation/data/h200_sdpa/README.md).

Each row times one ``F.scaled_dot_product_attention`` decode call (one query token per sequence, a bf16 cache of
``context`` tokens) in one of four forms; the model prices the same call through the serving program
(:func:`simulator.program.serving.cache_attention`, :func:`simulator.pricing.serving.cache_attention_seconds`) with
the form's kernel from :data:`simulator.serving.backends.SDPA_CALLS` (``hf_repeat_kv`` and ``repeat_interleave`` are
both ``repeat_kv``). Each form has two fitted constants: its rate from the batch 128 x 4K rows and its floor from the
batch 1 x 1K rows (both shapes; :data:`CALIBRATION`); :func:`fit` recomputes them and every other row validates them.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.caching import memo

DATA = Path(__file__).parent / "data" / "h200_sdpa" / "sdpa_decode.jsonl"
#: measured form -> the model's call form (simulator/serving/backends.py SDPA_CALLS)
FORMS = {"gqa_single_call": "gqa_single_call", "hf_repeat_kv": "repeat_kv", "repeat_interleave": "repeat_kv",
         "expanded_cache": "expanded_cache"}
#: (batch, context) of the rows the constants come from: the rate (largest) and the floor (smallest)
RATE_ROW, FLOOR_ROW = (128, 4096), (1, 1024)
CALIBRATION = {RATE_ROW, FLOOR_ROW}


@dataclass(frozen=True)
class SdpaRow:
    form: str
    batch: int
    context: int
    q_heads: int
    kv_heads: int
    head_dim: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def calibration(self) -> bool:
        return (self.batch, self.context) in CALIBRATION

    @property
    def cache_bytes(self) -> float:
        """K and V of every sequence, bf16."""
        return self.batch * self.context * self.kv_heads * self.head_dim * 2 * 2


def measured() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


@memo(maxsize=8)
def _plan(q_heads: int, kv_heads: int, head_dim: int):
    """A one-layer model of the row's attention shape on one H200 (only its attention op is priced)."""
    from simulator.scenario import load_scenario

    model = {"name": f"sdpa-{q_heads}-{kv_heads}", "layers": 1, "hidden": q_heads * head_dim, "heads": q_heads,
             "kv_heads": kv_heads, "head_dim": head_dim, "vocab": 32000, "ffn_hidden": 4 * q_heads * head_dim,
             "activation": "swiglu", "norm": "rmsnorm"}
    return load_scenario({"name": "sdpa", "system": {"profile": "hgx_h200", "gpus": 1}, "model": model,
                          "training": {"mode": "inference", "precision": "bf16"},
                          "serving": {"batch": 1, "input_len": 1, "output_len": 1, "attention": "torch_sdpa"}})


def predict_s(row: dict, kernel=None) -> float:
    """The model's seconds for the row's call (``kernel``: the form's SDPA_CALLS entry unless given)."""
    from simulator.compute.efficiency import default_efficiency
    from simulator.memory.inference import kv_cache_bytes_per_token_layer
    from simulator.plan import Batch
    from simulator.pricing.serving import cache_attention_seconds
    from simulator.program.serving import cache_attention
    from simulator.serving.backends import SDPA_CALLS

    sc = _plan(row["q_heads"], row["kv_heads"], row["head_dim"])
    rp, gpu = sc.plan, sc.cluster.node.gpu
    kernel = kernel or SDPA_CALLS[FORMS[row["call_form"]]]
    op = cache_attention(rp, Batch(row["batch"], 1, row["context"] - 1), kv_cache_bytes_per_token_layer(rp), kernel)
    return cache_attention_seconds(op, gpu, default_efficiency(gpu.architecture))


def sdpa_rows() -> list[SdpaRow]:
    return [SdpaRow(r["call_form"], r["batch"], r["context"], r["q_heads"], r["kv_heads"], r["head_dim"],
                    r["median_s"], predict_s(r)) for r in measured()]


def fit(hbm_Bps: float = 4.8e12) -> dict[str, dict[str, float]]:
    """Each form's constants from its calibration rows (medians over the two shapes): ``gqa_single_call`` and
    ``expanded_cache`` stream ``bytes`` (the cache, or heads/kv_heads copies of it) at ``efficiency`` x HBM after a
    ``floor_s``; ``repeat_kv`` (the ``hf_repeat_kv`` rows) adds a copy of (1 + heads/kv_heads) x the cache at
    ``copy_efficiency`` x HBM before reading the copy at expanded_cache's rate."""
    rows = measured()

    def at(form: str, where: tuple[int, int]) -> list[dict]:
        return [r for r in rows if r["call_form"] == form and (r["batch"], r["context"]) == where]

    def cache_of(r: dict) -> float:
        return r["batch"] * r["context"] * r["kv_heads"] * r["head_dim"] * 4

    def group(r: dict) -> float:
        return r["q_heads"] / r["kv_heads"]

    out = {}
    for form, bytes_of in (("gqa_single_call", cache_of), ("expanded_cache", lambda r: group(r) * cache_of(r))):
        rate = statistics.median(bytes_of(r) / r["median_s"] for r in at(form, RATE_ROW))
        floor = statistics.median(r["median_s"] - bytes_of(r) / rate for r in at(form, FLOOR_ROW))
        out[form] = {"efficiency": rate / hbm_Bps, "floor_s": floor}
    read = out["expanded_cache"]["efficiency"] * hbm_Bps

    def copy_s(r: dict) -> float:
        return r["median_s"] - group(r) * cache_of(r) / read

    copy = statistics.median((1 + group(r)) * cache_of(r) / copy_s(r) for r in at("hf_repeat_kv", RATE_ROW))
    floor = statistics.median(copy_s(r) - (1 + group(r)) * cache_of(r) / copy for r in at("hf_repeat_kv", FLOOR_ROW))
    out["repeat_kv"] = {"efficiency": out["expanded_cache"]["efficiency"], "copy_efficiency": copy / hbm_Bps,
                        "floor_s": floor}
    return out


def summary() -> dict[str, dict[str, float]]:
    """Median and largest |error| per measured form over the validation rows (the calibration rows left out)."""
    out = {}
    for form in FORMS:
        errors = [abs(r.error) for r in sdpa_rows() if r.form == form and not r.calibration]
        out[form] = {"rows": len(errors), "median_abs_error": statistics.median(errors),
                     "max_abs_error": max(errors), "within_15pct": sum(e <= 0.15 for e in errors) / len(errors)}
    return out
