"""Published DeepSpeed ZeRO-Offload step times against the model (docs/offload.md, "Validation";
data/deepspeed_offload.csv): Qwen2.5 fine-tuning on two GPUs of a DGX A100 40GB."""

from __future__ import annotations

from pathlib import Path

from simulator.entries.simulate import simulate
from simulator.resources import commented_csv
from simulator.scenario.load import load_scenario

DATA = Path(__file__).parent / "data" / "deepspeed_offload.csv"

#: the Hugging Face config.json of each model (Qwen/Qwen2.5-1.5B, Qwen/Qwen2.5-3B on huggingface.co)
MODELS = {
    "qwen2.5-1.5b": {"layers": 28, "hidden": 1536, "heads": 12, "kv_heads": 2, "ffn_hidden": 8960},
    "qwen2.5-3b": {"layers": 36, "hidden": 2048, "heads": 16, "kv_heads": 2, "ffn_hidden": 11008},
}
_QWEN2 = {"vocab": 151936, "activation": "swiglu", "norm": "rmsnorm", "tied_embeddings": True, "qkv_bias": True}


def offload_scenario(model: str, zero: int, offload: bool) -> dict:
    """The scenario of one row: 2 GPUs, data parallel, 4 x 512 tokens per GPU, one micro-batch, Hugging Face
    Transformers' model under DeepSpeed (the pytorch accounting family, ``hf_transformers`` kernels and host)."""
    return {"system": {"profile": "dgx_a100_40gb", "nodes": 1, "gpus": 2},
            "model": {"name": model, **MODELS[model], **_QWEN2},
            "parallel": {"dp": 2, "zero": zero, "optimizer_cpu_offload": offload},
            "training": {"seq_len": 512, "micro_batch": 4, "global_batch": 8, "precision": "bf16",
                         "framework": "hf_transformers"}}


def offload_rows() -> list[dict]:
    """Each published row with the model's step (``model_ms``) and its relative error."""
    out = []
    for r in commented_csv(DATA):
        step = simulate(load_scenario(offload_scenario(r["model"], int(r["zero"]), r["offload"] == "true"))).step
        model_ms = step.step_s * 1e3
        out.append({**r, "step_ms": float(r["step_ms"]), "model_ms": model_ms,
                    "error": model_ms / float(r["step_ms"]) - 1.0})
    return out
