"""One rank's share of a transformer layer (:class:`RankShape`): tokens, heads, FFN width and experts after TP, SP, CP,
Ulysses, EP and expert-TP sharding, read by FLOP counts, compute, memory and traffic.

The sharding rules live in one place, :mod:`simulator.plan.shape` (``rank_shape`` and ``ResolvedPlan.shape_of(batch)``),
above this package; here is only the value object and the unsharded shape of the whole model
(:meth:`RankShape.unsharded`, what model FLOP counts use).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class RankShape:
    """Per-rank sizes of one layer (module docstring); counts are floats (means over ranks)."""

    seq_len: int
    micro_batch: int
    tp: int
    cp: int
    ulysses: int
    ep: int
    etp: int
    sp: bool
    tokens: float
    """T = b s / (cp ulysses): tokens a rank projects."""
    norm_tokens: float
    """T / tp with sequence parallelism, else T: rows of norms, dropout and the router."""
    q_rows: float
    """b s / cp: query rows per head a rank's attention computes (over all s keys)."""
    heads: float
    """Query heads in attention: a / (tp ulysses)."""
    kv_heads: float
    """K/V heads in attention, after the Ulysses all-to-all (replicated where too few)."""
    heads_tp: float
    """Query heads per TP rank (projections): a / tp."""
    kv_heads_tp: float
    """K/V heads per TP rank (projections): kv / kv_ranks."""
    kv_ranks: int
    """Ranks each K/V projection is split over: min(tp, kv) (K/V heads replicated over the rest of TP)."""
    ffn: float
    """Dense FFN width per rank: ffn / tp."""
    local_experts: float
    """Routed experts per EP rank: E / ep (0 for a dense model)."""
    routed_rows: float
    """Rows the local experts receive in expectation: T_in x top_k x etp (0 for a dense model)."""
    vocab_tp: float
    """Output-layer rows (vocabulary entries) per TP rank: the vocabulary the weights hold (padded by Megatron-style
    frameworks to a multiple of 128 x tp) / tp."""

    @classmethod
    def unsharded(cls, model: ModelSpec, seq_len: int, micro_batch: int) -> RankShape:
        """The whole layer on one GPU (every degree 1) for ``micro_batch`` sequences of ``seq_len`` tokens: model
        FLOP counts (MFU's convention)."""
        tokens = float(micro_batch * seq_len)
        moe = model.moe
        return cls(seq_len=seq_len, micro_batch=micro_batch, tp=1, cp=1, ulysses=1, ep=1, etp=1, sp=False,
                   tokens=tokens, norm_tokens=tokens, q_rows=float(micro_batch * seq_len), heads=float(model.heads),
                   kv_heads=float(model.kv), heads_tp=float(model.heads), kv_heads_tp=float(model.kv), kv_ranks=1,
                   ffn=float(model.ffn), local_experts=float(moe.experts) if moe else 0.0,
                   routed_rows=tokens * moe.top_k if moe else 0.0, vocab_tp=float(model.vocab))

    @property
    def rows_per_expert(self) -> float:
        """Expected rows per local expert (balanced routing)."""
        return self.routed_rows / self.local_experts if self.local_experts else 0.0
