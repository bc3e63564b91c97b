"""What one rank of a pipeline stage holds: its parameters after TP/EP sharding, and the DP sharding stage.

Memory (bytes held) and traffic (bytes reduced and gathered) both start from these numbers, so they live with
the plan, computed once by one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.caching import memo
from simulator.model.params import embedding_params, head_params, layer_params, local_numel, mtp_head_params
from simulator.model.spec import ModelSpec, moe_flags_of
from simulator.plan.resolved import ResolvedPlan
from simulator.plan.shape import padded_vocab


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters (elements) one GPU of a stage holds after TP/EP sharding (before DP sharding)."""

    dense: float
    expert: float
    largest_layer: float
    layers: int
    outside_layers: float = 0.0
    """Of ``dense``: the embedding, final norm and output layer (and MTP head) the stage holds."""


def _local(tensors, m: ModelSpec, tp: int, ep: int, etp: int, vocab_scale: float,
           expert_scale: float = 1.0) -> tuple[float, float]:
    """(dense, expert) elements one rank holds; ``expert_scale``: (experts + redundant) / experts, the EPLB slots a
    rank holds over its share of the logical experts (``parallel.redundant_experts``)."""
    dense, expert = 0.0, 0.0
    for t in tensors:
        n = local_numel(t, tp=tp, kv_ranks=min(tp, m.kv), ep=ep, etp=etp)
        if t.name in ("word_embeddings", "output_layer"):
            n *= vocab_scale
        if t.shard.startswith("expert"):
            expert += n * expert_scale
        else:
            dense += n
    return dense, expert


def stage_params(rp: ResolvedPlan, stage: int) -> StageParams:
    """Local parameters of PP rank ``stage``: its layers, the embedding on the first stage, the final norm and
    output layer on the rank of the last (:attr:`ResolvedPlan.last_stage_rank`; a tied embedding is also copied to the last stage when pp > 1, as Megatron does, and so
    is the embedding the MTP modules read); the MTP modules' layers are in ``stage_layers``.

    A pure function of the arguments of :func:`_stage_params`, cached by them (plans of a sweep or search that
    share the model, the sharding degrees and the stage's layers share the result).

    With a mirrored schedule (DualPipe) a rank holds two copies' stages, its own and its mirror's (stage pp-1-i: rank i
    runs it for the micro-batches that enter at the last rank; deepseek-ai/DualPipe README at 3da1bbe, "Parameter
    Per Device 2x"), so its parameters are the sum of both; ``dualpipev`` keeps one copy (each rank holds two
    half-stages, the same layers in all as a 1F1B stage; the head on rank 0, beside the embedding)."""
    table = rp._memo.get("stage_params")   # every stage's, memoised on the plan: one cache lookup per plan
    if table is None:
        p = rp.parallel
        table = _all_stage_params(rp.model, p.tp, p.ep, p.etp, rp.recipe.megatron_vocab_padding, rp.stage_layers,
                                  rp.last_stage_rank, p.redundant_experts)
        if rp.schedule.mirrored:
            table = tuple(_mirrored(table[s], table[len(table) - 1 - s]) for s in range(len(table)))
        rp._memo["stage_params"] = table
    return table[stage]


def _mirrored(own: StageParams, mirror: StageParams) -> StageParams:
    """What a DualPipe rank holds: its stage of one copy of the model and the mirrored stage of the other."""
    return StageParams(own.dense + mirror.dense, own.expert + mirror.expert,
                       max(own.largest_layer, mirror.largest_layer), own.layers + mirror.layers,
                       own.outside_layers + mirror.outside_layers)


@memo(maxsize=1024)
def _all_stage_params(m: ModelSpec, tp: int, ep: int, etp: int, vocab_padding: bool,
                      stage_layers: tuple[tuple[int, ...], ...], last: int, redundant: int = 0
                      ) -> tuple[StageParams, ...]:
    """Every rank's :func:`_stage_params`; ``last``: the rank that runs the model's last stage (the head there needs
    its own copy of a tied or MTP embedding unless that rank is the first)."""
    return tuple(_stage_params(m, tp, ep, etp, vocab_padding, tuple(moe_flags_of(m, layers)),
                               max(layers, default=-1) >= m.layers, s == 0, s == last, last > 0, redundant)
                 for s, layers in enumerate(stage_layers))


@memo(maxsize=4096)
def _stage_params(m: ModelSpec, tp: int, ep: int, etp: int, vocab_padding: bool, kinds: tuple[bool, ...],
                  mtp: bool, first: bool, last: bool, pipelined: bool, redundant: int = 0) -> StageParams:
    """A stage's parameters from the FFN kind (MoE or not) of each of its layers in order, whether it holds the MTP
    modules' layers (indices from ``layers`` on), and its place in the pipeline: a layer's tensors depend on its
    index only through its kind (:func:`simulator.model.params.layer_params`), so stages with the same kinds
    share one value (the middle stages of a pipeline)."""
    scale = padded_vocab(m.vocab, tp, vocab_padding) / m.vocab
    slots = (m.moe.experts + redundant) / m.moe.experts if m.moe is not None else 1.0
    per_kind: dict[bool, tuple[float, float]] = {}
    dense = expert = largest = 0.0
    for kind in kinds:
        if kind not in per_kind:
            per_kind[kind] = _local(layer_params(m, _first_layer_of(m, kind)), m, tp, ep, etp, scale, slots)
        d, e = per_kind[kind]
        dense, expert, largest = dense + d, expert + e, max(largest, d + e)
    extra = []
    if first:
        extra += embedding_params(m)
    if last:
        extra += head_params(m) + (mtp_head_params(m) if mtp else [])
        if (m.tied_embeddings or mtp) and pipelined:  # MTP embeds the next tokens on the last stage
            extra += [t for t in embedding_params(m) if t.name == "word_embeddings"]
    d, e = _local(extra, m, tp, ep, etp, scale)
    return StageParams(dense + d, expert + e, largest, len(kinds), d + e)


def _first_layer_of(m: ModelSpec, kind: bool) -> int:
    """The first layer index whose FFN kind (:meth:`ModelSpec.is_moe_layer`) is ``kind``."""
    return next(i for i in range(m.layers) if m.is_moe_layer(i) == kind)
