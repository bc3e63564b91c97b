"""HF Transformers ``generate`` decoding on one H200 against the serving model (docs/serving/hf_generate.md):
Qwen2.5-0.5B and Llama-3.2-1B built from their configs, eager (DynamicCache: ``kernels: hf_eager``,
``kv_cache_impl: concat``) and compiled (StaticCache under torch.compile reduce-overhead: ``kernels: hf_compiled``,
``kv_cache_impl: static``), batch 1 / 8, prompt 512 / 2048, 64 new tokens (simulator/validation/data/h200_hf,
benchmarks/device/hf_decode.py on branch h15).

Eager rows come from the second call (``decode_run2.jsonl``: clocks warmed, 3 timed calls), compiled rows from the
first (``decode.jsonl``; its eager Llama rows ran on cold clocks after an inductor compile and are not used: its
README). Each kernel set has one fitted host constant (simulator/serving/backends.py); the rows it was fitted on are
``CALIBRATION`` and are reported apart from the rows that validate it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "h200_hf"

#: dims from each model's config.json on the Hugging Face Hub, as benchmarks/device/hf_common.py CONFIGS (h15)
MODELS = {
    "qwen2.5-0.5b": {"name": "qwen2.5-0.5b", "layers": 24, "hidden": 896, "heads": 14, "kv_heads": 2,
                     "ffn_hidden": 4864, "vocab": 151936, "activation": "swiglu", "norm": "rmsnorm",
                     "tied_embeddings": True, "qkv_bias": True, "position_embedding": "rope",
                     "max_position": 32768},
    "llama-3.2-1b": {"name": "llama-3.2-1b", "layers": 16, "hidden": 2048, "heads": 32, "kv_heads": 8,
                     "head_dim": 64, "ffn_hidden": 8192, "vocab": 128256, "activation": "swiglu", "norm": "rmsnorm",
                     "tied_embeddings": True, "position_embedding": "rope", "max_position": 131072},
}
#: (mode, model, batch, prompt) rows each kernel set's host constant was derived from (simulator/serving/backends.py)
CALIBRATION = {("eager", "qwen2.5-0.5b", 8, 512), ("eager", "llama-3.2-1b", 8, 512),
               ("compiled", "llama-3.2-1b", 1, 512), ("compiled", "llama-3.2-1b", 8, 512)}
#: the issue's target for every row (issue 28: "eager and compiled decode within 10%")
TOLERANCE = 0.10
SETUP = {"eager": ("hf_eager", "concat", "decode_run2.jsonl"), "compiled": ("hf_compiled", "static", "decode.jsonl")}
#: the same eager sweep run again later (call 4: twice in one command on a fresh machine, 7 timed calls each; the
#: data README's "Repeatability of eager decoding"), reported beside the scored call-2 rows, never scored
EAGER_REPEATS = ("decode_run4a.jsonl", "decode_run4b.jsonl")


def hf_scenario(mode: str, model: str, batch: int, prompt: int, new_tokens: int = 64) -> dict:
    """The benchmark's generate call as a scenario mapping (bf16, SDPA, one H200)."""
    kernels, cache, _ = SETUP[mode]
    return {"name": f"hf-{mode}-{model}", "system": {"profile": "hgx_h200", "gpus": 1}, "model": dict(MODELS[model]),
            "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": batch, "input_len": prompt, "output_len": new_tokens, "kernels": kernels,
                        "kv_cache_impl": cache, "attention": "torch_sdpa"}}


@dataclass(frozen=True)
class HfRow:
    mode: str
    model: str
    batch: int
    prompt: int
    measured_s: float
    predicted_s: float
    gpu_s: float
    kernels_measured: float
    kernels_predicted: int

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def calibration(self) -> bool:
        return (self.mode, self.model, self.batch, self.prompt) in CALIBRATION


def measured(mode: str, file: str | None = None) -> list[dict]:
    """The decode rows of ``mode`` from its file (README: eager from call 2, compiled from call 1), or from ``file``."""
    rows = [json.loads(line) for line in (DATA / (file or SETUP[mode][2])).read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("section") == "decode" and r["mode"] == mode]


def eager_repeats() -> dict[tuple[str, int, int], tuple[float, ...]]:
    """(model, batch, prompt) -> median seconds per token of each later eager sweep (``EAGER_REPEATS``, in order)."""
    out: dict[tuple[str, int, int], tuple[float, ...]] = {}
    for file in EAGER_REPEATS:
        for r in measured("eager", file):
            key = (r["model"], r["batch"], r["prompt"])
            out[key] = out.get(key, ()) + (r["per_token_s_median"],)
    return out


def hf_rows() -> list[HfRow]:
    """Every eager and compiled decode row with the model's mean decode step over its 64 tokens."""
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario

    out = []
    for mode in ("eager", "compiled"):
        for r in measured(mode):
            res = simulate_serving(load_scenario(hf_scenario(mode, r["model"], r["batch"], r["prompt"],
                                                             r["new_tokens"])))
            out.append(HfRow(mode, r["model"], r["batch"], r["prompt"], r["per_token_s_median"], res.tpot_s,
                             res.decode.gpu_s, r["per_token_kernels"], res.decode.kernels))
    return out
