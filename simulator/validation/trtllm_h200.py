"""TensorRT-LLM v0.5 static-batch throughput on one or two H200 (NVIDIA's H200 launch blog) against the serving model
with the ``tensorrt_llm_v0_5`` profile (the release the blog ran; ``tensorrt_llm`` is 1.0): a row for the TensorRT-LLM
profile family (issue 28 item 1), reported, not gated.

Source: NVIDIA/TensorRT-LLM/docs/source/blogs/H200launch.md at 1555478c1b417a0b34de05209862ea5a2ab9add1, table "H200
FP8 Max throughput" (TensorRT-LLM v0.5.0, TensorRT 9.1.0.4, "preliminary measured performance"): Llama 2 13B and
70B, FP8, batch = the largest power of 2 that fits, output tokens per second per GPU. Not the performance-overview
tables that issue 29 keeps back. Model dims: Llama 2 13B (40 layers, hidden 5120, 40 heads, SwiGLU 13824) and 70B
(80 layers, 8192, 64 heads, 8 K/V heads, 28672), vocabulary 32000, from meta-llama's config.json.

Each row: ``hgx_h200`` with ``tp`` GPUs, ``precision: fp8``, ``kv_cache_dtype: fp8``, ``serving: {batch, input_len,
output_len}``; predicted throughput per GPU = batch x output_len / e2e_s / tp (prefill of the whole batch, then the
decode steps), the blog's own definition (``out_tps=output_seqlen*batch_size/total_latency/tp``, Falcon180B-H200.md;
gptSessionBenchmark times ``GptSession::generate``, context phase included).

The K/V cache is 8-bit: the blog does not say so, but three of its batches cannot run with a 16-bit cache
(:func:`kv_fit`: 215 GB, 228 GB and 183 GB per GPU of 16-bit cache against 141 GB of HBM), and gptSessionBenchmark
runs the batch it is given (no admission, no preemption): a row that ran had its cache in memory. The 2023 llama
``build.py`` offers ``--enable_fp8`` with ``--fp8_kv_cache`` ("By default, we use dtype for KV cache"); the FP8
build is taken with its FP8 cache for every row (the "largest power of 2" batches are consistent with it).

:func:`xqa_rows`: the same mechanism against the XQA blog (NVIDIA/TensorRT-LLM/docs/source/blogs/XQA-kernel.md, TensorRT-LLM v0.7a-0.8a):
Llama-70B on one H200, 128 in / 2048 out, 1,227 tok/s/GPU without XQA and 2,941 with it; batch 192 from
Falcon180B-H200.md (the same 2,941 at "1xH200 TP1 ... BS 192"). Reported beside the table, not fitted.
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
#: the profile of the release the blog ran (simulator/implementation/frameworks/tensorrt_llm_v0_5.yaml)
FRAMEWORK = "tensorrt_llm_v0_5"
#: XQA blog: (decode attention kernel, published output tokens/s per GPU) for Llama-70B, 1 H200, batch 192, 128/2048
XQA = (("masked_mha", 1227), ("flash_decoding", 2941))
#: H200 SXM HBM, datasheet (hardware_profiles/gpus/h200_sxm.yaml datasheet_capacity)
HBM_BYTES = 141e9


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
            "parallel": {"tp": tp},
            "training": {"mode": "inference", "precision": "fp8", "kv_cache_dtype": "fp8", "framework": FRAMEWORK},
            "serving": {"batch": batch, "input_len": input_len, "output_len": output_len}}


def _throughput(scenario: dict) -> float:
    from simulator.entries.serve import simulate_serving
    from simulator.scenario import load_scenario

    s = scenario["serving"]
    result = simulate_serving(load_scenario(scenario))
    return s["batch"] * s["output_len"] / result.e2e_s / scenario["system"]["gpus"]


def trtllm_rows() -> list[TrtRow]:
    return [TrtRow(model, batch, tp, isl, osl, published, _throughput(scenario_for(model, batch, tp, isl, osl)))
            for model, batch, tp, isl, osl, published in ROWS]


def kv_fit(element_bytes: float) -> list[tuple[float, float]]:
    """Per row: (K/V cache bytes per GPU for the whole batch at full length, FP8 weight bytes per GPU) with
    ``element_bytes`` per cached element: 2 x layers x batch x (input + output) x K/V heads x 128 / tp x bytes;
    weights 1 B per parameter (embeddings and head included) / tp."""
    out = []
    for model, batch, tp, isl, osl, _ in ROWS:
        m = LLAMA2[model]
        kv = 2 * m["layers"] * batch * (isl + osl) * m["kv_heads"] * 128 * element_bytes / tp
        h, f, kvh = m["hidden"], m["ffn_hidden"], m["kv_heads"] * 128
        params = m["layers"] * (h * (2 * h + 2 * kvh) + 3 * h * f) + 2 * m["vocab"] * h
        out.append((kv, params / tp))
    return out


def xqa_rows() -> list[TrtRow]:
    """The XQA blog's two Llama-70B rows: this profile (masked MHA) and the same with a kernel that reads each K/V
    head once (``flash_decoding``, standing for XQA); ``model`` names the kernel."""
    out = []
    for kernel, published in XQA:
        sc = scenario_for("llama2-70b", 192, 1, 128, 2048)
        sc["serving"]["attention"] = kernel
        out.append(TrtRow(kernel, 192, 1, 128, 2048, published, _throughput(sc)))
    return out
