"""Host (CPU) time to issue one layer's kernels when a framework runs eagerly, and the floor it puts under the
layer's GPU time.

An eager framework (PyTorch modules, Megatron-Core with Transformer Engine, no CUDA graph) issues every kernel from
Python: module code, the autograd engine, allocator calls, one cuBLAS call per GEMM. When a layer's kernels are
short the GPU drains the launch queue and waits for the host: the layer then takes its host issue time, not its
GPU time. A blocking device-to-host read inside the layer (the MoE dispatchers read the per-expert token counts on
the host: DeepEP's normal dispatch and Megatron's all-to-all dispatcher both wait for them before the expert
GEMMs) empties the queue once per layer forward, so the host cannot run ahead across layers: the model takes each
layer's forward and backward on their own,

    forward  = max(GPU forward incl. exposed comm,  H_fwd)
    backward = max(GPU backward incl. exposed comm, H_bwd (+ H_fwd with full recompute))

and reports the difference as ``host`` (the GPU waiting for the host).

``H`` per layer, measured on the H200's host (``benchmarks/device/moe_host_overhead.py``: one Qwen3-235B-A22B
layer per rank in plain PyTorch, issued while a sleep kernel holds the GPU, so the host never waits; medians of
three rounds, data in ``simulator/validation/data/h200_host/moe_host.jsonl``; the numbers live in the
``megatron`` implementation profile's ``measured_host`` (simulator/implementation/frameworks/megatron.yaml), and
:func:`fit_host_costs` re-derives them from the data and a test pins them):

- a MoE layer: forward 2.26 ms + 57.2 us per local expert, backward 2.88 ms + 92.1 us per local expert (least
  squares over 9 (tp, local experts) cases, 1-32 experts). The per-expert part is the expert loop of TE's
  GroupedLinear on Hopper (one cuBLAS GEMM per expert: 2 forward, 4 backward, plus the split views and the
  gradient bookkeeping per expert; TE issue #1386 for why TE loops, TE issue #1499 for its per-expert PyTorch
  allocations).

The same proxy checks the composition: ``max(graph time, H_fwd + H_bwd)`` lands within -8%..+38% of the eager
wall time of its twelve cases, 9 of them within +-10% (the worst, a host-bound TP8 MoE layer: 8.1 ms predicted,
5.9 ms measured).

Dense layers get no floor yet. The same proxy's dense layer (unfused RMSNorm, SwiGLU: ~100 kernels) takes 1.25 ms
forward and 2.06 ms backward to issue; applied to every dense layer it turns the plain-PyTorch GPT check
(``simulator validate``, 24 layers of h 1024 on the H200, LayerNorm + GELU) from -16% into +21%: that lean layer
issues fewer kernels than the proxy's. A dense floor needs the kernel count of each framework's layer (the proxy
costs 26-35 us of host time per kernel, forward and backward together, in all twelve cases); until then only the
MoE layer, whose structure the proxy reproduces, carries one.

The numbers are a floor for Megatron-Core + Transformer Engine: TE's Python per module is heavier than a plain
``torch.nn.Linear`` (TE issue #2053: 90.5 us vs 33.2 us of CPU per forward on GH200, 99.7 vs 37.1 on GB200) and
Megatron adds its router, dispatcher and DDP hooks. The host CPU matters too (TaxBreak, arXiv 2603.12465: a faster
host cuts orchestration time 10-29%); this table is the H200 machine's CPU ('Intel Xeon Processor', 16 cores
lent). CUDA graphs (``training.host_launch: cuda_graphs``) remove the floor.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

HOST_DATA = "simulator/validation/data/h200_host/moe_host.jsonl"


@dataclass(frozen=True)
class HostIssueCosts:
    """Host seconds to issue one MoE layer's forward and backward for one micro-batch (module docstring)."""

    moe_fwd_s: float
    moe_bwd_s: float
    per_expert_fwd_s: float
    per_expert_bwd_s: float
    source: str
    dense_fwd_s: float = 0.0
    dense_bwd_s: float = 0.0
    checkpoint_fwd_s: float = 0.0
    """extra forward host seconds of a layer under full activation checkpointing (the wrapper's own work)"""
    checkpoint_bwd_s: float = 0.0
    """extra backward host seconds of a checkpointed layer besides its recomputed forward"""
    sac_fwd_s: float = 0.0
    """extra forward host seconds of a dense layer under op-level selective checkpointing (the policy's dispatch
    mode intercepting every op)"""
    sac_bwd_s: float = 0.0
    """extra backward host seconds of such a layer: the re-run forward's issue, intercepted again, and the
    checkpoint's bookkeeping"""
    step_s: float = 0.0
    """per micro-batch, outside the transformer layers (embedding, final norm, head, loss), forward and backward"""
    dense_runs_ahead: bool = False
    """no device-to-host sync inside a dense layer: the host issues ahead across layers (:func:`host_wait` is
    taken over the whole forward or backward of a chunk, not per layer)"""
    moe_runs_ahead: bool = False

    def layer(self, moe: bool, local_experts: float) -> tuple[float, float]:
        """(forward, backward) host seconds of a layer (MoE with ``local_experts`` per rank, or dense)."""
        if not moe:
            return self.dense_fwd_s, self.dense_bwd_s
        return (self.moe_fwd_s + self.per_expert_fwd_s * local_experts,
                self.moe_bwd_s + self.per_expert_bwd_s * local_experts)

    def runs_ahead(self, moe: bool) -> bool:
        """Whether a layer of this kind lets the host issue past it without waiting for the GPU."""
        return self.moe_runs_ahead if moe else self.dense_runs_ahead


def case_medians(path: str | Path | None = None) -> dict[tuple[str, int, int], dict[str, float]]:
    """Each (case, tp, local experts) of a ``moe_host_overhead.py`` log (default: ``HOST_DATA`` in this checkout):
    the median over its rounds of every timed field (graph, eager, eager with sync, host forward and backward)."""
    path = Path(path) if path is not None else Path(__file__).resolve().parents[2] / HOST_DATA
    cases: dict[tuple[str, int, int], list[dict]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if r.get("kind") == "layer":
            cases.setdefault((r["case"], r["tp"], r["local_experts"]), []).append(r)
    fields = ("graph_s", "eager_s", "eager_sync_s", "host_fwd_s", "host_bwd_s")
    return {k: {f: statistics.median(x[f] for x in v) for f in fields} for k, v in cases.items()}


def fit_host_costs(path: str | Path | None = None) -> HostIssueCosts:
    """The :class:`HostIssueCosts` of a ``moe_host_overhead.py`` log (:func:`case_medians`): least squares of the
    MoE cases' host seconds on local experts."""
    moe = [(k[2], v) for k, v in case_medians(path).items() if k[0] == "moe"]

    def line(field: str) -> tuple[float, float]:
        xs, ys = [e for e, _ in moe], [v[field] for _, v in moe]
        xm, ym = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - xm) * (y - ym) for x, y in zip(xs, ys, strict=True)) / sum((x - xm) ** 2 for x in xs)
        return ym - slope * xm, slope

    (mf, ef), (mb, eb) = line("host_fwd_s"), line("host_bwd_s")
    return HostIssueCosts(
        moe_fwd_s=mf, moe_bwd_s=mb, per_expert_fwd_s=ef, per_expert_bwd_s=eb, source=str(path or HOST_DATA))


def host_wait(host_s: float, gpu_s: float) -> float:
    """Seconds the GPU waits for the host in a section whose GPU work (comm exposure included) takes ``gpu_s`` and
    whose kernels take ``host_s`` to issue: the section takes ``max(gpu_s, host_s)``."""
    return max(0.0, host_s - gpu_s)
