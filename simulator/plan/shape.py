"""The batch a step processes, apart from the plan, and one rank's share of a layer for a (plan, batch): tokens,
heads, FFN width and experts after TP, SP, CP, Ulysses, EP and expert-TP sharding. This is the one home of the
per-rank head counts (K/V replication included); memory, compute, traffic, serving and multimodal read the
:class:`~simulator.model.shape.RankShape` it returns (``ResolvedPlan.shape_of(batch)``, ``ResolvedPlan.shape`` for
the training micro-batch) and never divide by a degree themselves.

Rules (Megatron-Core and DeepSpeed-Ulysses):
- a rank projects T = b s / (cp ulysses) tokens; with sequence parallelism the norms, dropout and the router see
  T / tp of them (the "replicated region" of Korthikanti et al. 2023);
- attention: a rank holds a / (tp ulysses) query heads over s / cp query rows against all s keys; K/V heads are
  split over TP (replicated when tp > kv_heads: each K/V head is held by tp / kv_heads ranks) and then over the
  Ulysses group (replicated when fewer K/V heads than Ulysses ranks remain);
- MoE: T_in = the router's tokens; the local experts (E / ep) receive T_in x top_k x etp / r rows in expectation
  (balanced routing) and each is sharded over etp. r is how many ranks of an expert group (ep x etp ranks, TP
  innermost) hold the same tokens: 1 with sequence parallelism, min(tp, ep x etp) without it, where every rank of a
  TP group holds all of its tokens (vLLM and SGLang run MoE under TP so) and an expert computes each token once.

Here b is the batch's sequences and s its new tokens per sequence (a training micro-batch: ``micro_batch`` and
``seq_len``; a serving prefill chunk: the chunk; a decode step: 1). Cached tokens do not enter the shape: they are
read by attention (the serving step prices them), not projected.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.shape import RankShape
from simulator.model.spec import ModelSpec
from simulator.plan.config import TrainingConfig


@dataclass(frozen=True, slots=True)
class Batch:
    """What one step processes on one DP rank: ``sequences`` sequences, each adding ``new`` tokens on top of
    ``cached`` tokens already in its K/V cache. A training micro-batch is ``Batch(micro_batch, seq_len)``
    (:meth:`of_training`); a serving prefill chunk ``Batch(n, chunk, past)``; a decode step ``Batch(n, 1, past)``."""

    sequences: int
    """b: sequences in the step (per DP rank)."""
    new: int
    """Tokens each sequence adds (projected, attended from, written to the cache)."""
    cached: int = 0
    """Tokens each sequence already holds in its K/V cache (attended to, not projected)."""

    def __post_init__(self) -> None:
        if self.sequences < 1 or self.new < 1 or self.cached < 0:
            raise ValueError(f"a batch needs sequences >= 1, new >= 1 and cached >= 0, got {self}")

    @classmethod
    def of_training(cls, training: TrainingConfig) -> Batch:
        """The training micro-batch: ``micro_batch`` sequences of ``seq_len`` tokens, nothing cached."""
        return cls(training.micro_batch, training.seq_len)

    @property
    def tokens(self) -> int:
        """New tokens of the step: sequences x new."""
        return self.sequences * self.new

    @property
    def context(self) -> int:
        """Tokens each sequence holds after the step: cached + new."""
        return self.cached + self.new


def heads_per_rank(heads: int, tp: int, ulysses: int = 1) -> float:
    """Query heads one rank holds in attention: heads / (tp ulysses) (Megatron-LM's column-parallel attention splits
    heads over TP, DeepSpeed-Ulysses' all-to-all over its group); with ``ulysses`` 1 the projections' heads per TP
    rank. Blocks outside the engine's stack (a CoCa cross-attention block, an attentional pooler) use it too."""
    return heads / (tp * ulysses)


def padded_vocab(vocab: int, tp: int, megatron: bool) -> int:
    """Megatron pads the vocabulary to a multiple of 128*tp (``--make-vocab-size-divisible-by 128``); plain PyTorch
    (``megatron`` False) keeps it."""
    if not megatron:
        return vocab
    unit = 128 * tp
    return -(-vocab // unit) * unit


def rank_shape(model: ModelSpec, seq_len: int, micro_batch: int, *, tp: int = 1, cp: int = 1, ulysses: int = 1,
               ep: int = 1, etp: int = 1, sp: bool = False, vocab_padding: bool = False,
               redundant_experts: int = 0) -> RankShape:
    """The :class:`RankShape` of ``model`` for ``micro_batch`` sequences of ``seq_len`` new tokens under these
    degrees (module docstring for the rules). Plans call it through ``ResolvedPlan.shape_of``; tests and notebooks
    may call it directly."""
    tokens = micro_batch * seq_len / (cp * ulysses)
    norm_tokens = tokens / tp if sp else tokens
    kv_ranks = min(tp, model.kv)
    kv_tp = model.kv / kv_ranks
    kv_attn = kv_tp / ulysses if kv_tp >= ulysses else 1.0
    moe = model.moe
    replicas = 1 if sp else min(tp, ep * etp)   # ranks of an expert group holding the same tokens (module docstring)
    return RankShape(
        seq_len=seq_len, micro_batch=micro_batch, tp=tp, cp=cp, ulysses=ulysses, ep=ep, etp=etp, sp=sp,
        tokens=tokens, norm_tokens=norm_tokens, q_rows=micro_batch * seq_len / cp,
        heads=heads_per_rank(model.heads, tp, ulysses), kv_heads=kv_attn, heads_tp=heads_per_rank(model.heads, tp),
        kv_heads_tp=kv_tp, kv_ranks=kv_ranks,
        ffn=model.ffn / tp, local_experts=(moe.experts + redundant_experts) / ep if moe else 0.0,
        routed_rows=norm_tokens * moe.top_k * etp / replicas if moe else 0.0,
        vocab_tp=padded_vocab(model.vocab, tp, vocab_padding) / tp)
