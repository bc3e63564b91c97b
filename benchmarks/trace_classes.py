"""Kernel-by-kernel GPU time of a Kineto trace of one Hugging Face training step (simulator/validation/data/
h200_traces), summed per op class: each kernel is tied to its launch by correlation id, the launch to the aten ops
around it on the same host thread (their names and input shapes) and, in backward, to the autograd node running it.
The class rules follow transformers 5.17's Llama / Qwen2 modeling code (LlamaRMSNorm: ``.to(float32)``, ``pow(2)``,
``mean(-1)``, ``rsqrt``, ``mul``, ``.to(bf16)``, ``weight *``; apply_rotary_pos_emb: ``q * cos + rotate_half(q) *
sin`` with rotate_half's slices, ``neg`` and ``cat``; LlamaMLP: ``down(silu(gate(x)) * up(x))``; the residual adds;
ForCausalLMLoss: ``logits.float()`` then ``F.cross_entropy``) by the shapes the ops see (hidden h, FFN width,
vocabulary, head dim)."""

from __future__ import annotations

import bisect
import collections
import gzip
import json
from pathlib import Path

CLASSES = ("gemm fwd", "gemm bwd", "sdpa fwd", "sdpa bwd", "rmsnorm", "rope", "swiglu", "residual", "layout",
           "loss", "embedding", "optimizer", "memset/memcpy", "other")
_GEMM = ("nvjet", "cublas", "cutlass", "gemm", "splitKreduce")
_SDPA = ("cudnn", "fmha", "flash", "sdpa")


def _events(path: Path) -> list[dict]:
    with gzip.open(path) as fh:
        return json.load(fh)["traceEvents"]


class _Ops:
    """The aten ops of each host thread, for looking up the ones around a launch."""

    def __init__(self, events: list[dict]):
        self.by_tid = collections.defaultdict(list)
        for e in events:
            if e.get("cat") == "cpu_op":
                self.by_tid[e["tid"]].append(e)
        for ops in self.by_tid.values():
            ops.sort(key=lambda e: e["ts"])
        self.starts = {tid: [e["ts"] for e in ops] for tid, ops in self.by_tid.items()}

    def around(self, tid, ts: float) -> list[dict]:
        ops = self.by_tid.get(tid, [])
        i = bisect.bisect_right(self.starts.get(tid, []), ts)
        # ops are nested: walk back over earlier starts while any may still be open (bounded look-back)
        return [e for e in ops[max(0, i - 400):i] if e["ts"] + e["dur"] >= ts]


def classify(kernel: str, names: list[str], dims: list, types: list, dims_model: dict, backward: bool) -> str:
    """The class of one kernel (see the module docstring); ``names``: the aten ops and autograd node around its
    launch, outermost first; ``dims``/``types``: the innermost op's input shapes and dtypes."""
    h, ffn, vocab, hd = dims_model["h"], dims_model["ffn"], dims_model["vocab"], dims_model["hd"]
    text = " ".join(names)
    flat = [d for d in dims if isinstance(d, list)]
    if kernel.startswith(("Memset", "Memcpy")):
        return "memset/memcpy"
    if any(k in kernel for k in _GEMM):
        return "gemm bwd" if backward else "gemm fwd"
    if any(k in kernel for k in _SDPA):
        return "sdpa bwd" if backward else "sdpa fwd"
    if "adamw" in text.lower() or "_foreach" in text or "Optimizer" in text:
        return "optimizer"
    if any(k in text for k in ("cross_entropy", "log_softmax", "nll_loss", "LogSoftmax", "NllLoss")) or \
            any(d and d[-1] == vocab for d in flat):
        return "loss"
    if "mbedding" in text:
        return "embedding"
    if any(ffn in d for d in flat):
        return "swiglu"
    if any(k in text for k in ("aten::cat", "aten::neg", "NegBackward", "SliceBackward", "CatBackward",
                               "aten::slice_backward")):
        return "rope"
    four = [d for d in flat if len(d) == 4 and d[-1] == hd]
    if four:
        mul = any(k in text for k in ("aten::mul", "aten::add"))
        return "rope" if mul and any(d[1] == 1 for d in four) or "MulBackward" in text else "layout"
    if any(k in text for k in ("aten::pow", "aten::rsqrt", "aten::mean", "PowBackward", "RsqrtBackward",
                               "MeanBackward", "ToCopyBackward", "aten::to")) or \
            any(t == "float" for t in types) or any(d == [h] for d in flat):
        return "rmsnorm"
    if any(d and d[-1] == h for d in flat):
        return "residual"
    return "other"


def trace_classes(path: Path, dims_model: dict) -> tuple[dict[str, float], list[tuple[str, str, float]]]:
    """(seconds per class, the (class, phase, kernel name, seconds) of every kernel) of one trace."""
    events = _events(path)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = _Ops(events)
    out = dict.fromkeys(CLASSES, 0.0)
    rows = []
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        launch = launches.get(e["args"].get("correlation"))
        around = ops.around(launch["tid"], launch["ts"]) if launch else []
        around.sort(key=lambda o: (o["ts"], -o["dur"]))
        names = [o["name"] for o in around]
        inner = next((o for o in reversed(around) if o["name"].startswith("aten::")), {"args": {}})
        backward = any(n.startswith("autograd::engine") for n in names)
        cls = classify(e["name"], names, inner["args"].get("Input Dims", []), inner["args"].get("Input type", []),
                       dims_model, backward)
        out[cls] += e["dur"] * 1e-6
        rows.append((cls, "bwd" if backward else "fwd", e["name"], e["dur"] * 1e-6))
    return out, rows
