"""What one rank of a pipeline stage holds: its parameters after TP/EP sharding, and the DP sharding stage.

Memory (bytes held) and traffic (bytes reduced and gathered) both start from these numbers, so they live with
the plan, computed once by one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.params import embedding_params, head_params, layer_params, local_numel
from simulator.plan.resolved import ResolvedPlan


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters (elements) one GPU of a stage holds after TP/EP sharding (before DP sharding)."""

    dense: float
    expert: float
    largest_layer: float
    layers: int


def padded_vocab(vocab: int, tp: int, megatron: bool) -> int:
    """Megatron pads the vocabulary to a multiple of 128*tp (``--make-vocab-size-divisible-by 128``); plain PyTorch
    (``megatron`` False) keeps it."""
    if not megatron:
        return vocab
    unit = 128 * tp
    return -(-vocab // unit) * unit


def _local(tensors, rp: ResolvedPlan, vocab_scale: float) -> tuple[float, float]:
    p, dense, expert = rp.parallel, 0.0, 0.0
    for t in tensors:
        n = local_numel(t, tp=p.tp, kv_heads=rp.model.kv, ep=p.ep, etp=p.etp)
        if t.name in ("word_embeddings", "output_layer"):
            n *= vocab_scale
        if t.shard.startswith("expert"):
            expert += n
        else:
            dense += n
    return dense, expert


def stage_params(rp: ResolvedPlan, stage: int) -> StageParams:
    """Local parameters of PP rank ``stage``: its layers, the embedding on the first stage, the final norm and
    output layer on the last (a tied embedding is also copied to the last stage when pp > 1, as Megatron does)."""
    m, p = rp.model, rp.parallel
    layers = rp.stage_layers[stage]
    kinds = len(layers) if m.moe is None else tuple(m.is_moe_layer(i) for i in layers)
    key = ("stage_params", kinds, stage == 0, stage == p.pp - 1)   # what the result depends on
    if key not in rp._memo:
        rp._memo[key] = _stage_params(rp, stage)
    return rp._memo[key]


def _stage_params(rp: ResolvedPlan, stage: int) -> StageParams:
    m, p = rp.model, rp.parallel
    scale = padded_vocab(m.vocab, p.tp, rp.recipe.megatron_vocab_padding) / m.vocab
    per_kind: dict[bool, tuple[float, float]] = {}
    dense = expert = largest = 0.0
    for i in rp.stage_layers[stage]:
        kind = m.is_moe_layer(i)
        if kind not in per_kind:
            per_kind[kind] = _local(layer_params(m, i), rp, scale)
        d, e = per_kind[kind]
        dense, expert, largest = dense + d, expert + e, max(largest, d + e)
    extra = []
    if stage == 0:
        extra += embedding_params(m)
    if stage == p.pp - 1:
        extra += head_params(m)
        if m.tied_embeddings and p.pp > 1:
            extra += [t for t in embedding_params(m) if t.name == "word_embeddings"]
    d, e = _local(extra, rp, scale)
    return StageParams(dense + d, expert + e, largest, len(rp.stage_layers[stage]))
