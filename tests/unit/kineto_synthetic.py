"""A small hand-written Kineto trace whose numbers are worked out by hand in tests/unit/test_trace_stats.py.

Times in microseconds as Kineto writes them. One training step on one NVIDIA H200:
- forward (main thread 1): 7 kernels, two layers of [gemm_a, relu, gemm_b] and a ``loss`` kernel; launch calls
  (4 us each) every 10 us from t = 0; each kernel runs 5 us from 1 us after its launch call ends, so the GPU idles
  5 us before every kernel after the first (host-bound). Then ``loss.item()``: cudaMemcpyAsync at 72 (3 us), its DtoH
  copy on the GPU at 76-78, cudaStreamSynchronize 75-90.
- backward (autograd thread 2, inside evaluate_function operators): 4 kernels, two layers of [gemm_dgrad,
  relu_bwd], launched every 10 us from t = 100, each 20 us back to back from 105 (GPU-bound).
- optimizer: ``Optimizer.step#AdamW.step`` 200-260 on thread 1, one fused AdamW kernel 215-240.
GEMM shapes: the first gemm_a is aten::mm [64, 128] x [128, 256] bf16 (5 us); the first gemm_dgrad aten::mm
[64, 256] x [256, 128] bf16 (20 us).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

DEVICE = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_011_871_232, "numSms": 132,
          "computeMajor": 9, "computeMinor": 0}


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(events, corr, ts, kname, kstart, kdur, tid=1, ext=None, cat="kernel", call="cudaLaunchKernel"):
    extra = {"External id": ext} if ext is not None else {}
    events.append(_x("cuda_runtime", call, ts, 4 if call == "cudaLaunchKernel" else 3, tid, correlation=corr,
                     **extra))
    events.append({"ph": "X", "cat": cat, "name": kname, "pid": 0, "tid": 7, "ts": kstart, "dur": kdur,
                   "args": {"device": 0, "stream": 7, "correlation": corr, **extra}})


def synthetic_trace(device: dict | None = None) -> dict:
    """The trace described in the module docstring, as the JSON document."""
    events = []
    names = ["gemm_a", "relu", "gemm_b", "gemm_a", "relu", "gemm_b", "loss"]
    for i, name in enumerate(names):
        ext = 10 if i == 0 else None
        if ext:
            events.append(_x("cpu_op", "aten::mm", 10 * i - 1, 6, 1, **{
                "External id": 10, "Input Dims": [[64, 128], [128, 256]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"]}))
        _launch(events, 100 + i, 10 * i, name, 10 * i + 5, 5, ext=ext)
    _launch(events, 200, 72, "Memcpy DtoH (Device -> Pageable)", 76, 2, cat="gpu_memcpy", call="cudaMemcpyAsync")
    events.append(_x("cuda_runtime", "cudaStreamSynchronize", 75, 15, 1))
    for i, name in enumerate(["gemm_dgrad", "relu_bwd", "gemm_dgrad", "relu_bwd"]):
        t = 100 + 10 * i
        events.append(_x("cpu_op", f"autograd::engine::evaluate_function: Op{i}", t - 1, 8, 2))
        ext = 20 if i == 0 else None
        if ext:
            events.append(_x("cpu_op", "aten::mm", t, 6, 2, **{
                "External id": 20, "Input Dims": [[64, 256], [256, 128]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"]}))
        _launch(events, 300 + i, t, name, 105 + 20 * i, 20, tid=2, ext=ext)
    events.append(_x("user_annotation", "Optimizer.step#AdamW.step", 200, 60, 1))
    _launch(events, 400, 210, "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", 215, 25)
    return {"schemaVersion": 1, "deviceProperties": [device or DEVICE], "traceEvents": events,
            "traceName": "synthetic", "displayTimeUnit": "ms"}


def write_trace(path: Path, doc: dict | None = None, compress: bool = False) -> Path:
    text = json.dumps(doc if doc is not None else synthetic_trace())
    if compress:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path
