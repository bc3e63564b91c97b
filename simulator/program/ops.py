"""The op types of a program: what one rank runs for one layer (or the head, or the embedding) and one micro-batch.

Every op is a frozen, hashable value; a :class:`LayerProgram` holds them in tuples. Units: GEMM sizes in elements,
FLOPs in floating-point operations, memory-bound traffic in bytes (read + written through HBM). Every dtype is
decided when the program is built (:mod:`simulator.program.build`) and recorded on the op, so pricing
(:mod:`simulator.pricing.compute`) never re-derives it. docs/program.md describes the fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.traffic import CommOp

#: a GEMM's phase: forward, backward data gradient, backward weight gradient, or flash attention's in-kernel
#: recomputation of Q K^T inside its backward (simulator.model.flops)
GemmPhase = Literal["fwd", "bwd_dgrad", "bwd_wgrad", "bwd_recompute"]
#: how a GEMM runs: one dense cuBLAS GEMM (batched when ``batch`` > 1), the routed experts as one grouped GEMM
#: (slower than a dense GEMM of the same shape: ``ComputeEfficiency.grouped_fraction``), or the routed experts one
#: dense GEMM each (Megatron's SequentialMLP, ``moe.experts: sequential``)
GemmKernel = Literal["dense", "grouped_expert", "sequential_expert"]
#: a memory-bound op's kernel: one fused kernel (its byte count), a measured chain of PyTorch ops
#: (copy-equivalent bytes, :mod:`simulator.program.op_chains`), eager PyTorch's extra copies and casts, or bytes
#: moved inside a serving engine's kernel set (no launch of their own: ``LayerProgram.launches`` counts the set's)
MemKernel = Literal["fused", "chain", "eager", "kernel_set"]
#: core-attention kernels: fused ones (TE / FlashAttention-2 / PyTorch SDPA) at a fitted fraction of the tensor
#: peak, or ``unfused`` score GEMMs plus softmax and dropout as memory-bound ops
AttentionKernel = Literal["flash", "flash2", "sdpa", "unfused"]
#: what a program describes: a transformer layer, the output head, the embedding, a routed-expert FFN, or a module
#: a multimodal model adds to the engine's stack (:mod:`simulator.program.multimodal`)
ProgramKind = Literal["dense", "moe", "head", "embedding", "experts", "cross_attention", "pooler", "projector",
                      "contrastive_loss"]

EXPERT_KERNELS = ("grouped_expert", "sequential_expert")


@dataclass(frozen=True, slots=True)
class Gemm:
    """``batch`` products of [m, k] x [k, n] in ``dtype`` (elements); ``density`` < 1 for causal-masked scores.

    ``weight_dtype``: the dtype the [k, n] weight operand is read in when it differs from the compute ``dtype``
    ("": the same): weight-only kernels (an fp8 checkpoint served on a GPU without fp8 tensor cores, vLLM's
    Marlin-style kernels) read 1-byte weights and compute in bf16. ``slowdown``: a grouped-expert GEMM's extra time
    factor beyond the grouped kernel's (serving: the routing's load imbalance over the expert kernel's efficiency
    relative to the measured grouped GEMM; 1 in training)."""

    name: str
    phase: GemmPhase
    m: float
    k: float
    n: float
    batch: float = 1
    density: float = 1.0
    dtype: str = "bf16"
    kernel: GemmKernel = "dense"
    weight_dtype: str = ""
    slowdown: float = 1.0

    @property
    def flops(self) -> float:
        """2 * m * k * n * batch * density FLOPs."""
        return 2.0 * self.m * self.k * self.n * self.batch * self.density

    @property
    def expert(self) -> bool:
        """A routed-expert GEMM (grouped or sequential)."""
        return self.kernel in EXPERT_KERNELS


@dataclass(frozen=True, slots=True)
class MemOp:
    """A memory-bound kernel: ``bytes`` read + written through HBM in phase ``fwd`` or ``bwd``; ``attention``
    marks the unfused attention core (re-run by selective recompute); ``kernel`` as :data:`MemKernel`."""

    name: str
    phase: str
    bytes: float
    attention: bool = False
    kernel: MemKernel = "fused"


@dataclass(frozen=True, slots=True)
class AttentionOp:
    """The core attention of one layer (Q K^T, softmax, dropout, P V) for one micro-batch.

    ``fwd_flops``/``bwd_flops``: FLOPs by phase (backward includes a fused kernel's recomputation of Q K^T);
    ``kernel``: :data:`AttentionKernel`; ``seq_len``: the key length one rank attends over (s / cp), with
    ``dhead`` the axes of the fused kernels' efficiency fit (``ComputeEfficiency.attention_fraction``); ``dtype``:
    16-bit under fp8 / fp4 recipes. ``gemms``: the score GEMMs of the ``unfused`` kernel (empty for fused ones;
    its softmax and dropout are the program's memory-bound ops with ``attention`` set)."""

    fwd_flops: float
    bwd_flops: float
    kernel: AttentionKernel
    seq_len: float
    dhead: int
    dtype: str
    gemms: tuple[Gemm, ...] = ()

    @property
    def fused(self) -> bool:
        return self.kernel != "unfused"


@dataclass(frozen=True, slots=True)
class CacheAttentionOp:
    """The core attention of a serving step over the K/V cache (forward only), one layer on one rank.

    ``flops``: causal FLOPs of the new tokens' queries over ``seq_len`` keys (cached + new); ``kv_bytes``: the K/V
    cache those keys occupy (``sequences x seq_len x cache bytes per token``), read once. ``decode`` (one new token
    per sequence): the decode kernel streams the cache at ``kv_read_efficiency`` of HBM bandwidth, at most
    ``kv_cap_Bps`` (an unsplit kernel's CTAs x per-CTA rate; inf for split-KV kernels), or runs its FLOPs at
    ``compute_efficiency`` of the 16-bit peak (None: the forward FlashAttention curve,
    ``ComputeEfficiency.attention_fraction("sdpa_fwd", ...)``). Prefill: the forward FlashAttention curve, or the
    cache read at the memory-bound rate if slower. Rates: :mod:`simulator.serving.backends` (decode kernels) and
    ``simulator/compute/data/compute_efficiency.yaml`` (the forward curve). ``floor_s``: a decode call's measured fixed
    seconds in place of one launch (None: ``launch_s``); ``copy_bytes``: bytes a per-call expansion of K/V to every
    query head moves before the kernel, at ``copy_efficiency`` of HBM bandwidth (PyTorch SDPA's call forms,
    :data:`simulator.serving.backends.SDPA_CALLS`). ``elements``, ``ctas``: a kernel bound by its CTAs' work
    (TensorRT-LLM's masked MHA) takes at least ``ctas x cta_s + elements / element_rate``."""

    flops: float
    kv_bytes: float
    seq_len: float
    dhead: int
    decode: bool
    kv_read_efficiency: float = 1.0
    kv_cap_Bps: float = float("inf")
    compute_efficiency: float | None = None
    floor_s: float | None = None
    copy_bytes: float = 0.0
    copy_efficiency: float = 1.0
    dtype: str = "bf16"
    elements: float = 0.0
    element_rate: float = float("inf")
    ctas: float = 0.0
    cta_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LayerProgram:
    """The ops one rank runs for one layer (``kind`` dense / moe), the output head, the embedding, or a routed
    expert FFN, for one micro-batch.

    ``gemms``: linear GEMMs in model order; ``memops``: memory-bound kernels; ``attention``: the core attention
    (None outside transformer layers); ``comm``: the per-layer collectives the plan implies for this kind
    (:mod:`simulator.traffic`; priced on their groups by the schedule); ``fwd_flops``/``bwd_flops``: the executed
    model FLOPs (backward includes flash attention's recomputation); ``local_experts``: routed experts on this rank
    (the host issue cost of an eager MoE layer, :mod:`simulator.compute.host`); ``host_issue``: whether the
    framework's per-layer host issue cost applies; ``launches``: kernels beyond the GEMMs and attention whose
    launch the program charges once each (a serving engine's kernel set, :mod:`simulator.serving.backends`: its
    memory-bound ops are those kernels, priced by bytes; 0 in training, where each memory-bound op pays its own)."""

    kind: ProgramKind
    gemms: tuple[Gemm, ...] = ()
    memops: tuple[MemOp, ...] = ()
    attention: AttentionOp | CacheAttentionOp | None = None
    comm: tuple[CommOp, ...] = ()
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    local_experts: float = 0.0
    host_issue: bool = False
    launches: int = 0

    def gemms_in(self, *phases: str) -> tuple[Gemm, ...]:
        return tuple(o for o in self.gemms if o.phase in phases)

    def memops_in(self, phase: str) -> tuple[MemOp, ...]:
        return tuple(o for o in self.memops if o.phase == phase)


#: Megatron-LM ``--recompute-modules`` -> (forward GEMM name prefixes, forward memory-bound op names) they re-run
#: (core_attn is the attention core, priced apart: ``LayerTime.attn_fwd_s``)
RECOMPUTE_MODULE_OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "layernorm": ((), ("norm1", "norm2")),
    "mlp": (("mlp.",), ("activation",)),
    "moe": (("router", "experts.", "shared_experts."), ("moe_permute", "moe_sort_chunks", "expert_assembly",
                                                         "expert_activation", "shared_activation")),
    "moe_act": ((), ("expert_activation",)),
    "shared_experts": (("shared_experts.",), ("shared_activation",)),
    "mla_up_proj": (("q_b_proj", "kv_b_proj"), ()),
}
