"""Memory-bound work that frameworks run as chains of PyTorch ops rather than one fused kernel: the MoE layer's
local token permutation and the vocabulary cross entropy, in copy-equivalent bytes.

A chain's *copy-equivalent bytes* are its measured time multiplied by the rate of a streaming copy measured in the
same run on the same GPU: what a streaming kernel would move in that time. The step-time model prices them like
any memory-bound op, at ``HBM bandwidth x memory_efficiency`` (:mod:`simulator.program.memops`, priced by
:mod:`simulator.pricing.compute`); the ratio to a copy is what carries over to other GPUs (an assumption: the
indexed and atomic kernels are memory-bound on every GPU the simulator knows).

Measured on one H200 (torch 2.11, CUDA 13.0; ``benchmarks/device/moe_dispatch_paths.py``, data in
``simulator/validation/data/h200_moe_chains/moe_dispatch_paths.jsonl``; a streaming copy ran at 4.0-4.2 TB/s),
each chain's forward + backward captured in a CUDA graph as the framework writes it, with T tokens entering the
layer's dispatcher, R = T x k routed rows and hidden size h:

| chain (``moe.permute``) | framework | forward | backward |
|---|---|---|---|
| ``fused`` | TE moe_permute / moe_unpermute (Megatron ``--moe-permute-fusion``), DeepEP | 8 R h | 8 R h |
| ``index_select`` | Megatron core_v0.10 onwards, unfused (moe_utils: index_select; scatter_add_) | 29.8 R h + 7.4 T h | 56.0 R h + 6.2 T h |
| ``index_copy`` | Megatron core_v0.7-v0.9 moe_utils (index_select; index_copy_, x probs, sum over k) | 34.7 R h + 13.5 T h | 63.1 R h + 2.7 T h |
| ``gather_scatter`` | Megatron core_v0.5-v0.6 all-gather dispatcher (torch.gather / scatter / scatter_add) | 51.8 R h + 7.9 T h | 59.9 R h + 3.8 T h |

``fused`` is a byte count (each routed row read and written once by the permute, and once more by the unpermute;
TE was not available on the device), the other three are least-squares fits over seven shapes (T 4096-16384, k
1-8, h 2048-7168; every shape within 3.6% for index_select and gather_scatter, 6.6% for index_copy). Most of the
unfused time is the bf16 ``scatter_add`` of the unpermute and the scatter-add that autograd makes of every
gather's backward: atomic adds at 0.16-0.27 TB/s (the permute benchmark in ``simulator/validation/data/h200_moe``).

Experts run one by one (Megatron's SequentialMLP, ``moe.experts: sequential``) assemble their outputs into one
tensor: ``zeros_like`` plus one slice assignment per expert, whose backward (autograd's CopySlices) clones the
whole gradient once per expert: forward 6.5 + 0.22 E, backward 4.4 + 13.0 E copy-equivalent bytes per R h for E
local experts (fit over E = 2-32, T 8192, k 2, h 2048).

The cross entropy (``training.cross_entropy``): ``fused`` is one pass that reads the 16-bit logits and writes the
fp32 softmax forward, and reads it and writes the 16-bit gradient backward (6 + 6 bytes per logit); ``unfused``
is Megatron's _VocabParallelCrossEntropy on ``logits.float()`` (core_v0.6 tensor_parallel/cross_entropy.py: cast,
max, subtract, exp, sum, divide; backward: the one-hot update, an in-place multiply, the cast back): 52.9 forward
and 17.4 backward copy-equivalent bytes per logit (medians of four shapes, vocabularies 4,000-151,936). Plain
PyTorch's ``F.cross_entropy(logits.float(), target)`` (``framework: pytorch``; torchtitan's loss): cast, log_softmax
and nll_loss forward, their backward and the cast back: 28.0 forward and 27.1 backward (a second run,
``cross_entropy.jsonl``, which also repeats the Megatron chain to within 1%).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CHAIN_DATA = "simulator/validation/data/h200_moe_chains/moe_dispatch_paths.jsonl"
CROSS_ENTROPY_DATA = "simulator/validation/data/h200_moe_chains/cross_entropy.jsonl"


@dataclass(frozen=True)
class PermuteChain:
    """Copy-equivalent bytes of the permute + unpermute of one MoE layer and micro-batch, per routed row x hidden
    element and per token x hidden element, forward and backward. A chain that also covers the experts' SwiGLU
    (``fwd_act`` / ``bwd_act``: per routed row x expert FFN element, in place of the fused activation's bytes) and
    the per-expert weight-gradient traffic of a loop that indexes stacked expert weights (``bwd_expert_param``:
    per expert parameter of the layer, per local expert) is a whole framework's MoE block outside its GEMMs
    (:data:`HF_EXPERT_CHAINS`)."""

    fwd_row: float
    fwd_token: float
    bwd_row: float
    bwd_token: float
    fwd_act: float = 0.0
    bwd_act: float = 0.0
    bwd_expert_param: float = 0.0

    def bytes(self, rows: float, tokens: float, hidden: float) -> tuple[float, float]:
        """(forward, backward) copy-equivalent bytes for ``rows`` routed rows of ``tokens`` tokens."""
        return ((self.fwd_row * rows + self.fwd_token * tokens) * hidden,
                (self.bwd_row * rows + self.bwd_token * tokens) * hidden)

    @property
    def owns_activation(self) -> bool:
        return bool(self.fwd_act or self.bwd_act)


@dataclass(frozen=True)
class SequentialAssembly:
    """Copy-equivalent bytes per routed row x hidden element of SequentialMLP's output assembly:
    ``fwd + fwd_per_expert x E`` forward, ``bwd + bwd_per_expert x E`` backward for E local experts."""

    fwd: float
    fwd_per_expert: float
    bwd: float
    bwd_per_expert: float

    def bytes(self, rows: float, hidden: float, experts: float) -> tuple[float, float]:
        return ((self.fwd + self.fwd_per_expert * experts) * rows * hidden,
                (self.bwd + self.bwd_per_expert * experts) * rows * hidden)


FUSED_PERMUTE = PermuteChain(fwd_row=8.0, fwd_token=0.0, bwd_row=8.0, bwd_token=0.0)
"""TE's fused permute and unpermute: each routed row's 2 bytes x h read and written by each (byte count)."""

FUSED_CROSS_ENTROPY = (6.0, 6.0)
"""Bytes per logit of a fused cross entropy: read 2 + write 4 forward, read 4 + write 2 backward."""


def _rows(path: str | Path | None) -> list[dict]:
    with open(path or CHAIN_DATA) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def fit_permute_chains(path: str | Path | None = None) -> dict[str, PermuteChain]:
    """The measured chains (``index_select``, ``index_copy``, ``gather_scatter``): least squares of each shape's copy-equivalent
    bytes of the forward and of forward + backward on (R h, T h); backward = the difference."""
    rows = [r for r in _rows(path) if r.get("kind") == "path" and "copy_equiv_bytes" in r]
    out = {}
    for chain in ("index_select", "index_copy", "gather_scatter"):
        fit = {}
        for part in ("fwd", "fwd_bwd"):
            sel = [r for r in rows if r["case"] == f"{chain}_{part}"]
            a = np.array([[r["R"] * r["h"], r["T"] * r["h"]] for r in sel], dtype=float)
            y = np.array([r["copy_equiv_bytes"] for r in sel], dtype=float)
            fit[part] = np.linalg.lstsq(a, y, rcond=None)[0]
        fwd, total = fit["fwd"], fit["fwd_bwd"]
        out[chain] = PermuteChain(fwd_row=float(fwd[0]), fwd_token=float(fwd[1]), bwd_row=float(total[0] - fwd[0]),
                                  bwd_token=float(total[1] - fwd[1]))
    return out


def fit_sequential_assembly(path: str | Path | None = None) -> SequentialAssembly:
    """Least-squares lines on the local expert count of the assembly's forward and forward + backward."""
    sel = [r for r in _rows(path) if r.get("case") == "sequential_experts_fwd_bwd" and "fwd_copy_equiv_per_rh" in r]
    e = np.array([r["experts"] for r in sel], dtype=float)
    fwd = np.polyfit(e, [r["fwd_copy_equiv_per_rh"] for r in sel], 1)
    total = np.polyfit(e, [r["copy_equiv_per_rh"] for r in sel], 1)
    return SequentialAssembly(fwd=float(fwd[1]), fwd_per_expert=float(fwd[0]), bwd=float(total[1] - fwd[1]),
                              bwd_per_expert=float(total[0] - fwd[0]))


def _fit_cross_entropy(rows: list[dict], total_key: str, fwd_key: str) -> tuple[float, float]:
    """(forward, backward) copy-equivalent bytes per logit of one loss chain of the ``ce_unfused`` rows: medians over
    the shapes of its forward and forward + backward times, each at the median rate of the run's streaming copies."""
    copy_bps = statistics.median(r["copy_gbps"] * 1e9 for r in rows if r.get("case") == "copy")
    ce = [r for r in rows if r.get("case") == "ce_unfused" and fwd_key in r]
    fwd = statistics.median(r[fwd_key] * copy_bps / (r["T"] * r["V"]) for r in ce)
    total = statistics.median(r[total_key] * copy_bps / (r["T"] * r["V"]) for r in ce)
    return fwd, total - fwd


def fit_unfused_cross_entropy(path: str | Path | None = None) -> tuple[float, float]:
    """Megatron's unfused cross entropy, timed against the streaming copies of the path runs (the cross-entropy
    rows' own copy of a single 5 GB tensor ran once at 2.8 TB/s, the path copies at 4.0-4.2 TB/s every time)."""
    return _fit_cross_entropy(_rows(path), "time_s", "fwd_s")


def fit_torch_cross_entropy(path: str | Path | None = None) -> tuple[float, float]:
    """PyTorch's ``F.cross_entropy`` on fp32 logits (``cross_entropy.jsonl``, timed against the copy of that run)."""
    return _fit_cross_entropy(_rows(path or CROSS_ENTROPY_DATA), "torch_s", "torch_fwd_s")


HF_EXPERT_CHAINS: dict[str, PermuteChain] = {
    "hf_grouped_mm": PermuteChain(fwd_row=64.31, fwd_token=14.69, bwd_row=96.31, bwd_token=7.81,
                                  fwd_act=21.72, bwd_act=35.91),
    "hf_expert_loop": PermuteChain(fwd_row=129.86, fwd_token=19.14, bwd_row=230.17, bwd_token=51.11,
                                   fwd_act=46.69, bwd_act=98.37, bwd_expert_param=7.49),
}
"""Hugging Face Transformers 5.17's MoE block outside its GEMMs (OlmoeSparseMoeBlock and the experts
implementations of integrations/moe.py), fitted on the Kineto traces of one training step of OLMoE-1B-7B reduced to
4 layers on one H200 (``simulator/validation/data/h200_traces/olmoe_l4_*``; ``benchmarks/hf_moe_trace_classes.py``
``fit_chain``: each class's GPU seconds per layer x the H200's priced memory rate, 4.8 TB/s x 0.803, over its
unit at T = 4096 tokens, top-8, R = 32768 routed rows, h = 2048, f = 1024, 64 experts). Per layer, forward /
backward, microseconds:

| class | grouped_mm | eager loop | unit |
|---|---|---|---|
| router softmax, topk (its GEMM apart) | 32 / 17 | 42 / 111 | T h |
| argsort / histc / cumsum / where / nonzero / one_hot | 74 / 36 | 366 / 1,084 | R h |
| row gather, inverse gather, index_add_ and their index_put backward | 122 / 431 | 825 / 2,172 | R h |
| masked_fill of the gathered rows and both GEMM outputs | 688 / 749 | - | R h |
| routing-weight multiply, sum over k | 226 / 456 | 252 / 703 | R h |
| zero fills | 10 / 5 | 817 / 49 | R h |
| SwiGLU on the chunked gate/up output | 189 / 313 | 407 / 856 | R f |
| per-expert weight gradient (SelectBackward: zeros + add) | - | - / 50,052 | expert params x E |
| expert GEMMs (priced as GEMMs, not here) | 752 / 1,536 | 1,037 / 2,134 | |

``grouped_mm`` (transformers' default) argsorts the R expert ids, gathers the rows, masks rows of out-of-range
experts with ``masked_fill`` three times, runs two ``torch._grouped_mm``, weights, un-permutes and sums over k;
the eager loop indexes ``gate_up_proj[e]`` / ``down_proj[e]`` of the stacked [E, ...] weights per expert hit,
whose backward (SelectBackward) writes a zero gradient the size of the whole stacked tensor and adds it into the
accumulated gradient: 2 + 6 bytes per parameter per expert by hand, 7.49 measured (the fills and adds stream
slightly faster than the table's rate). One traced shape: the split between the units is by the tensor each class
touches, not a fit over shapes."""

PERMUTE_CHAINS: dict[str, PermuteChain] = {
    "fused": FUSED_PERMUTE,
    "index_select": PermuteChain(fwd_row=29.82, fwd_token=7.41, bwd_row=56.01, bwd_token=6.17),
    "index_copy": PermuteChain(fwd_row=34.70, fwd_token=13.53, bwd_row=63.12, bwd_token=2.70),
    "gather_scatter": PermuteChain(fwd_row=51.81, fwd_token=7.87, bwd_row=59.91, bwd_token=3.80),
    **HF_EXPERT_CHAINS,
}
"""``moe.permute`` -> its copy-equivalent bytes (module docstring; the measured rows are
:func:`fit_permute_chains` of the H200 log, rounded, and a test re-derives them)."""

SEQUENTIAL_ASSEMBLY = SequentialAssembly(fwd=6.46, fwd_per_expert=0.220, bwd=4.42, bwd_per_expert=12.99)
"""SequentialMLP's output assembly (:func:`fit_sequential_assembly` of the H200 log, rounded)."""

CROSS_ENTROPY_BYTES: dict[str, tuple[float, float]] = {"fused": FUSED_CROSS_ENTROPY, "unfused": (52.9, 17.4),
                                                        "pytorch": (28.0, 27.1)}
"""The loss chain (``Recipe.cross_entropy``: ``training.cross_entropy`` with Megatron, ``pytorch`` with plain
PyTorch) -> (forward, backward) bytes per logit (unfused: :func:`fit_unfused_cross_entropy`, pytorch:
:func:`fit_torch_cross_entropy` of the H200 logs, rounded)."""

EAGER_CHAINS: dict[str, tuple[float, float, str]] = {
    "norm1": (52.9, 103.6, "tokens_hidden"), "norm2": (52.9, 103.6, "tokens_hidden"),
    "rope": (52.4, 69.2, "tokens_qk"), "activation": (9.3, 16.4, "tokens_ffn"),
    "bias_dropout_add.attn": (5.5, 26.0, "tokens_hidden"), "bias_dropout_add.mlp": (5.5, 26.0, "tokens_hidden"),
}
"""Plain eager PyTorch's chains for a Hugging Face Llama / Qwen2 layer (transformers 5.17 modeling_llama.py and
modeling_qwen2.py): layer op -> (forward, backward) copy-equivalent bytes per element of the op's tensor (tokens x
hidden for the RMSNorms and residual adds, tokens x (q + k heads) x head dim for RoPE, tokens x FFN width for
SwiGLU). The RMSNorm is ``x.to(float32)``, ``pow(2).mean(-1)``, ``rsqrt``, ``mul``, ``.to(bf16)``, ``weight *``
(8 kernels forward, 14 backward: PowBackward, MeanBackward, RsqrtBackward, the casts' backward, the weight
gradient's reduction); RoPE is ``q * cos + rotate_half(q) * sin`` for q and k (rotate_half: two slices, ``neg``,
``cat``; 10 kernels forward, 18 backward with the slices' zero-filled gradients); SwiGLU is ``silu(gate) * up``;
a residual add's backward includes the accumulation of the branch gradients. Fitted on the Kineto trace of
Qwen2.5-0.5B at 8 x 2048 (``simulator/validation/data/h200_traces``, ``benchmarks/hf_trace_gap.py``: each class's
kernel time x HBM bandwidth x the Hopper table's memory_efficiency, per element: no streaming copy ran in the
traced step, so the table's achievable rate, 4.8 TB/s x 0.803, stands in for the copy rate). Checked on Llama-3.2-1B
at 8 x 2048: every class and phase within 4% except the residual backward (18.2, 30% below). At 4 x 1024 (both
models) the norms, SwiGLU and residual forward stay within 6%, RoPE runs 9-19% above its fit (shorter kernels)."""
