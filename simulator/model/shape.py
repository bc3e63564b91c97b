"""One rank's share of a transformer layer: tokens, heads, FFN width and experts after TP, SP, CP, Ulysses, EP and
expert-TP sharding, derived once from the model and the parallel degrees (the plan builds it once per plan:
``ResolvedPlan.shape``), and read by FLOP counts, compute, memory and traffic.

Rules (Megatron-Core and DeepSpeed-Ulysses):
- a rank projects T = b s / (cp ulysses) tokens; with sequence parallelism the norms, dropout and the router see
  T / tp of them (the "replicated region" of Korthikanti et al. 2023);
- attention: a rank holds a / (tp ulysses) query heads over s / cp query rows against all s keys; K/V heads are
  split over TP (replicated when tp > kv_heads: each K/V head is held by tp / kv_heads ranks) and then over the
  Ulysses group (replicated when fewer K/V heads than Ulysses ranks remain);
- MoE: T_in = the router's tokens; the local experts (E / ep) receive T_in x top_k x etp rows in expectation
  (balanced routing) and each is sharded over etp.
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
    """K/V heads per TP rank (projections): kv / min(tp, kv)."""
    ffn: float
    """Dense FFN width per rank: ffn / tp."""
    local_experts: float
    """Routed experts per EP rank: E / ep (0 for a dense model)."""
    routed_rows: float
    """Rows the local experts receive in expectation: T_in x top_k x etp (0 for a dense model)."""

    @property
    def rows_per_expert(self) -> float:
        """Expected rows per local expert (balanced routing)."""
        return self.routed_rows / self.local_experts if self.local_experts else 0.0


def rank_shape(model: ModelSpec, seq_len: int, micro_batch: int, *, tp: int = 1, cp: int = 1, ulysses: int = 1,
               ep: int = 1, etp: int = 1, sp: bool = False) -> RankShape:
    """The :class:`RankShape` of ``model`` for one micro-batch of ``micro_batch`` x ``seq_len`` under these degrees
    (module docstring for the rules). Plans call this once; tests and notebooks may call it directly."""
    tokens = micro_batch * seq_len / (cp * ulysses)
    norm_tokens = tokens / tp if sp else tokens
    kv_tp = model.kv / min(tp, model.kv)
    kv_attn = kv_tp / ulysses if kv_tp >= ulysses else 1.0
    moe = model.moe
    return RankShape(
        seq_len=seq_len, micro_batch=micro_batch, tp=tp, cp=cp, ulysses=ulysses, ep=ep, etp=etp, sp=sp,
        tokens=tokens, norm_tokens=norm_tokens, q_rows=micro_batch * seq_len / cp,
        heads=model.heads / (tp * ulysses), kv_heads=kv_attn, heads_tp=model.heads / tp, kv_heads_tp=kv_tp,
        ffn=model.ffn / tp, local_experts=moe.experts / ep if moe else 0.0,
        routed_rows=norm_tokens * moe.top_k * etp if moe else 0.0)
