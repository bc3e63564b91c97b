"""Prefill op classes of plain PyTorch on one H200 at a shape outside the Llama-3-8B family (hidden 5120, 40 query /
8 K/V heads of 128, FFN 13824; simulator/validation/data/h200_prefill_ops, benchmarks/device/prefill_ops.py), and the
attribution of the Llama-3-8B-shaped prefill rows (h200_serve) to op classes
(docs/serving/torch_eager.md, the attribution table).

- :func:`chain_bytes`: the copy-equivalent bytes per element of each memory-bound kernel at ``m`` tokens, the
  numbers behind :data:`simulator.serving.backends.TORCH_EAGER_CHAINS` (its calibration is the 16384-token rows).
- :func:`layer_rows`: one whole layer (eager and CUDA-graph timed) against the model's layer at the same shape.
- :func:`attribution`: each h200_serve prefill row against the same session's isolated ops (ops.jsonl: the layer's
  GEMMs at m tokens, causal attention at ``tokens``), the rest being the memory-bound kernels, launches and host.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "h200_prefill_ops" / "prefill_ops.jsonl"
SERVE = Path(__file__).parent / "data" / "h200_serve"
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 5120, 40, 8, 128, 13824
#: the tokens of the calibration rows (every operand set past the 50 MB L2)
CALIBRATION_M = 16384


def _rows(path: Path = DATA) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def op_times(path: Path = DATA) -> dict[tuple[str, int], float]:
    """(op, m or tokens[, kv data]) -> seconds of the isolated-op rows."""
    out = {}
    for r in _rows(path):
        if r["kind"] == "op":
            key = (r["op"], r.get("m", r.get("tokens")))
            out[key + ((r["kv_data"],) if "kv_data" in r else ())] = r["time_s"]
    return out


def chain_bytes(m: int, rate_Bps: float) -> dict[str, float]:
    """Copy-equivalent bytes per element (seconds x ``rate_Bps`` / elements) of each memory-bound kernel at ``m``
    tokens, in :class:`simulator.serving.backends.EagerChains`' units."""
    t = {k[0]: v for k, v in op_times().items() if len(k) == 2 and k[1] == m}
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {"norm": t["rms_norm"] * rate_Bps / (m * HIDDEN), "residual_add": t["add"] * rate_Bps / (m * HIDDEN),
            "rope": (t["rope_q"] + t["rope_k"]) * rate_Bps / (m * (q + kv)),
            "swiglu": t["silu_mul"] * rate_Bps / (m * FFN), "attn_out": t["attn_out"] * rate_Bps / (m * q),
            "kv_write": (t["cache_k"] + t["cache_v"]) * rate_Bps / (m * 2 * kv)}


def _scenario(seqs: int, tokens: int, layers: int) -> dict:
    model = {"name": "prefill-ops-5120", "layers": layers, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS,
             "ffn_hidden": FFN, "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm",
             "position_embedding": "rope", "max_position": 32768}
    return {"name": "prefill-ops", "system": {"profile": "hgx_h200", "gpus": 1}, "model": model,
            "parallel": {"tp": 1}, "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": seqs, "input_len": tokens, "output_len": 1, "kernels": "torch_eager",
                        "attention": "torch_sdpa"}}


def model_layer(seqs: int, tokens: int) -> dict[str, float]:
    """The model's seconds of one layer of the measured shape by op class, and ``gpu`` in all (a 2-layer minus a
    1-layer prefill)."""
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario

    two, one = (simulate_serving(load_scenario(_scenario(seqs, tokens, n))).prefill for n in (2, 1))
    out = {k: two.breakdown_s[k] - one.breakdown_s[k] for k in ("gemm", "attention", "memory_ops", "launch")}
    return {**out, "gpu": two.gpu_s - one.gpu_s}


#: the isolated rows of each model op class at m tokens (one sequence)
CLASS_OPS = {"gemm": ("qkv", "o", "gate_up", "down"),
             "memory_ops": ("rms_norm", "rms_norm", "add", "add", "rope_q", "rope_k", "cache_k", "cache_v",
                            "attn_out", "silu_mul")}


def class_rows() -> list[dict]:
    """Per m: each model op class against the sum of its isolated rows (the layer's two norms and two residual
    adds counted twice; attention on random K/V, one sequence of m tokens)."""
    t, out = op_times(), []
    for m in sorted({k[1] for k in t if len(k) == 2 and k[0] == "qkv"}):
        model = model_layer(1, m)
        measured = {c: sum(t[(o, m)] for o in ops) for c, ops in CLASS_OPS.items()}
        measured["attention"] = t[("prefill_attention", m, "randn")]
        for c, v in measured.items():
            out.append({"m": m, "class": c, "measured_s": v, "model_s": model[c], "error": model[c] / v - 1})
    return out


def layer_rows() -> list[dict]:
    """Each whole-layer row (``layer_eager``, ``layer_graph``) with the model's layer seconds."""
    out = []
    for r in _rows():
        if r["kind"] in ("layer_eager", "layer_graph"):
            model = model_layer(r["seqs"], r["tokens"])["gpu"]
            out.append({"kind": r["kind"], "seqs": r["seqs"], "tokens": r["tokens"], "measured_s": r["time_s"],
                        "model_s": model, "error": model / r["time_s"] - 1})
    return out


def attribution(file: str = "serve.jsonl", min_tokens: int = 1024) -> list[dict]:
    """Each prefill row of ``file`` (h200_serve) split by op class: the layer GEMMs and causal attention from the
    same session's isolated ops (ops.jsonl; GEMMs log-log interpolated in m, attention only where measured at the
    row's length) x layers, the rest (``other``: memory-bound kernels, launches, embedding, LM head, host) by
    difference; beside each, the model's class from its breakdown."""
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario
    from simulator.validation.serving import h200_scenario

    ops = op_times(SERVE / "ops.jsonl")
    per_m: dict[int, float] = {}
    for (name, m, *_), t in ops.items():
        if name in ("qkv", "o", "gate_up", "down"):
            per_m[m] = per_m.get(m, 0.0) + t
    ms = np.array(sorted(per_m))
    gemm = np.array([per_m[m] for m in ms])
    out = []
    for line in (SERVE / file).read_text().splitlines():
        r = json.loads(line)
        if r["kind"] != "prefill" or r["tokens"] * r["seqs"] < min_tokens:
            continue
        scenario = load_scenario(h200_scenario(r["seqs"], r["tokens"]))
        res, layers, n = simulate_serving(scenario), scenario.model.layers, r["seqs"] * r["tokens"]
        b = res.prefill.breakdown_s
        g = layers * float(np.exp(np.interp(np.log(n), np.log(ms), np.log(gemm))))
        att = ops.get(("prefill_attention", r["tokens"]))
        a = layers * r["seqs"] * att if att is not None else b["attention"]
        out.append({"seqs": r["seqs"], "tokens": r["tokens"], "measured_s": r["time_s"], "ops_gemm_s": g,
                    "ops_attention_s": a, "attention_measured": att is not None,
                    "other_s": r["time_s"] - g - a, "model_gemm_s": b["gemm"], "model_attention_s": b["attention"],
                    "model_other_s": res.prefill.step_s - b["gemm"] - b["attention"],
                    "model_s": res.prefill.step_s, "error": res.prefill.step_s / r["time_s"] - 1})
    return out
