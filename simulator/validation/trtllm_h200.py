"""TensorRT-LLM v0.5 static-batch throughput on one or two H200 (NVIDIA's H200 launch blog) against the serving model
with the ``tensorrt_llm`` profile: a row for that profile (issue 28 item 1), reported, not gated.

Source: NVIDIA/TensorRT-LLM/docs/source/blogs/H200launch.md at 1555478c1b417a0b34de05209862ea5a2ab9add1, table "H200
FP8 Max throughput" (TensorRT-LLM v0.5.0, TensorRT 9.1.0.4, "preliminary measured performance"): Llama 2 13B and
70B, FP8, batch = the largest power of 2 that fits, output tokens per second per GPU. Not the performance-overview
tables that issue 29 keeps back. Model dims: Llama 2 13B (40 layers, hidden 5120, 40 heads, SwiGLU 13824) and 70B
(80 layers, 8192, 64 heads, 8 K/V heads, 28672), vocabulary 32000, from meta-llama's config.json.

Each row: ``hgx_h200`` with ``tp`` GPUs, ``precision: fp8``, ``serving: {batch, input_len, output_len}``; predicted
throughput per GPU = batch x output_len / e2e_s / tp (prefill of the whole batch, then the decode steps). The blog
does not say the K/V cache dtype: the activation dtype is taken (``kv_cache_dtype: fp8`` makes every row faster,
+9..+43% and +192%; its "largest batch that fits" matches fp8 K/V for the 13B rows and bf16 for the 70B rows).
"""

from __future__ import annotations

from dataclasses import dataclass

LLAMA2 = {
    "llama2-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=13824, vocab=32000,
                       activation="swiglu", norm="rmsnorm", tied_embeddings=False),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000,
                       activation="swiglu", norm="rmsnorm", tied_embeddings=False),
}
#: (model, batch, tp, input_len, output_len, published output tokens/s per GPU)
ROWS = (("llama2-13b", 1024, 1, 128, 128, 11819), ("llama2-13b", 128, 1, 128, 2048, 4750),
        ("llama2-13b", 64, 1, 2048, 128, 1349), ("llama2-70b", 512, 1, 128, 128, 3014),
        ("llama2-70b", 512, 2, 128, 2048, 1654), ("llama2-70b", 64, 1, 2048, 128, 341),
        ("llama2-70b", 32, 1, 2048, 128, 303))


@dataclass(frozen=True)
class TrtRow:
    model: str
    batch: int
    tp: int
    input_len: int
    output_len: int
    published: float           # output tokens/s per GPU
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


def scenario_for(model: str, batch: int, tp: int, input_len: int, output_len: int) -> dict:
    return {"name": f"trtllm-{model}-b{batch}-tp{tp}-{input_len}-{output_len}",
            "system": {"profile": "hgx_h200", "nodes": 1, "gpus": tp}, "model": dict(LLAMA2[model], name=model),
            "parallel": {"tp": tp}, "training": {"mode": "inference", "precision": "fp8", "framework": "tensorrt_llm"},
            "serving": {"batch": batch, "input_len": input_len, "output_len": output_len}}


def trtllm_rows() -> list[TrtRow]:
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario

    out = []
    for model, batch, tp, isl, osl, published in ROWS:
        result = simulate_serving(load_scenario(scenario_for(model, batch, tp, isl, osl)))
        out.append(TrtRow(model, batch, tp, isl, osl, published, batch * osl / result.e2e_s / tp))
    return out
