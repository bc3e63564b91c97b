"""Exact parameter counts, tensor by tensor, with how each tensor is sharded by tensor/expert parallelism.

Every weight and bias of a layer is a :class:`ParamTensor`; counts per component are sums over them. The shard
kind says how Megatron splits the tensor over TP (column/row-parallel weights and column biases: split; norms,
row-parallel biases, routers and learned position embeddings: replicated; K/V projections: split over at most
``kv_heads`` ranks, replicated beyond) or over expert parallelism (routed experts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.model.spec import ModelSpec

Shard = Literal["tp", "replicated", "kv", "expert", "expert_replicated"]


@dataclass(frozen=True, slots=True)
class ParamTensor:
    """One parameter tensor: ``numel`` elements in total over all experts/ranks, and how it is sharded."""

    name: str
    numel: int
    shard: Shard
    component: str


def local_numel(t: ParamTensor, *, tp: int, kv_ranks: int, ep: int = 1, etp: int = 1) -> float:
    """Elements of ``t`` held by one rank under tensor parallel ``tp`` and expert parallel ``ep`` x ``etp``; K/V
    tensors split over ``kv_ranks`` ranks (``RankShape.kv_ranks``: K/V heads are replicated when tp > kv_heads,
    Megatron-Core GQA; the plan derives it, :mod:`simulator.plan.shape`).

    Source: Megatron-LM column/row-parallel linear layers (Shoeybi et al. 2019, Sec. 3).
    """
    if t.shard == "tp":
        return t.numel / tp
    if t.shard == "kv":
        return t.numel / kv_ranks
    if t.shard == "expert":
        return t.numel / (ep * etp)
    if t.shard == "expert_replicated":
        return t.numel / ep
    return float(t.numel)


def _linear(name: str, fan_in: int, fan_out: int, bias: bool, shard: Shard, comp: str,
            bias_shard: Shard | None = None) -> list[ParamTensor]:
    out = [ParamTensor(f"{name}.weight", fan_in * fan_out, shard, comp)]
    if bias:
        out.append(ParamTensor(f"{name}.bias", fan_out, bias_shard or shard, comp))
    return out


def _norm(name: str, width: int, model: ModelSpec, comp: str) -> list[ParamTensor]:
    n = 2 * width if model.norm == "layernorm" else width
    return [ParamTensor(f"{name}", n, "replicated", comp)]


def attention_params(model: ModelSpec) -> list[ParamTensor]:
    """Attention block: input norm, Q/K/V (or MLA projections), output projection."""
    h, a, comp = model.hidden, model.heads, "attention"
    out = _norm("input_norm", h, model, comp)
    if model.mla is not None:
        m = model.mla
        if m.q_lora_rank is None:
            out += _linear("q_proj", h, a * m.qk_head_dim, False, "tp", comp)
        else:
            out += _linear("q_a_proj", h, m.q_lora_rank, False, "replicated", comp)
            out += [ParamTensor("q_a_norm", m.q_lora_rank, "replicated", comp)]
            out += _linear("q_b_proj", m.q_lora_rank, a * m.qk_head_dim, False, "tp", comp)
        out += _linear("kv_a_proj", h, m.kv_lora_rank + m.qk_rope_head_dim, False, "replicated", comp)
        out += [ParamTensor("kv_a_norm", m.kv_lora_rank, "replicated", comp)]
        out += _linear("kv_b_proj", m.kv_lora_rank, a * (m.qk_nope_head_dim + m.v_head_dim), False, "tp", comp)
        out += _linear("o_proj", a * m.v_head_dim, h, False, "tp", comp)
        return out
    d, kv, bias = model.dhead, model.kv, model.has_qkv_bias
    out += _linear("q_proj", h, a * d, bias, "tp", comp)
    out += _linear("k_proj", h, kv * d, bias, "kv", comp)
    out += _linear("v_proj", h, kv * d, bias, "kv", comp)
    if model.qk_norm:
        out += [ParamTensor("q_norm", d, "replicated", comp), ParamTensor("k_norm", d, "replicated", comp)]
    out += _linear("o_proj", a * d, h, model.linear_bias, "tp", comp, bias_shard="replicated")
    return out


def mlp_params(model: ModelSpec, ffn: int, prefix: str = "mlp", comp: str = "mlp") -> list[ParamTensor]:
    """Dense MLP of width ``ffn``: fc1 (gate+up for swiglu, column-parallel) and fc2 (row-parallel)."""
    h, bias = model.hidden, model.linear_bias
    fc1_out = 2 * ffn if model.glu else ffn
    return (_linear(f"{prefix}.fc1", h, fc1_out, bias, "tp", comp)
            + _linear(f"{prefix}.fc2", ffn, h, bias, "tp", comp, bias_shard="replicated"))


def moe_params(model: ModelSpec) -> list[ParamTensor]:
    """MoE FFN: router (replicated), routed experts (sharded over EP x ETP), shared experts (TP like a dense MLP)."""
    assert model.moe is not None  # internal: caller checked
    moe, h, bias = model.moe, model.hidden, model.linear_bias
    e, f = moe.experts, moe.expert_ffn_hidden
    fc1_out = 2 * f if model.glu else f
    out = _linear("router", h, e, moe.router_bias, "replicated", "router")
    out += [ParamTensor("experts.fc1.weight", e * h * fc1_out, "expert", "experts")]
    if bias:
        out += [ParamTensor("experts.fc1.bias", e * fc1_out, "expert", "experts")]
    out += [ParamTensor("experts.fc2.weight", e * f * h, "expert", "experts")]
    if bias:
        out += [ParamTensor("experts.fc2.bias", e * h, "expert_replicated", "experts")]
    if moe.shared_ffn:
        out += mlp_params(model, moe.shared_ffn, prefix="shared_experts", comp="shared_experts")
    return out


def layer_params(model: ModelSpec, index: int) -> list[ParamTensor]:
    """All parameter tensors of transformer layer ``index``."""
    ffn_block = moe_params(model) if model.is_moe_layer(index) else mlp_params(model, model.ffn)
    return attention_params(model) + _norm("post_attention_norm", model.hidden, model, "mlp") + ffn_block


def embedding_params(model: ModelSpec) -> list[ParamTensor]:
    """Input side (first pipeline stage): vocab-parallel word embedding and learned positions (replicated)."""
    out = [ParamTensor("word_embeddings", model.vocab * model.hidden, "tp", "embedding")]
    if model.position_embedding == "learned":
        out.append(ParamTensor("position_embeddings", model.max_position * model.hidden, "replicated", "embedding"))
    return out


def head_params(model: ModelSpec) -> list[ParamTensor]:
    """Output side (last pipeline stage): final norm and, when untied, the vocab-parallel output layer."""
    out = _norm("final_norm", model.hidden, model, "final_norm")
    if not model.tied_embeddings:
        out.append(ParamTensor("output_layer", model.vocab * model.hidden, "tp", "output_layer"))
    return out


def mtp_head_params(model: ModelSpec) -> list[ParamTensor]:
    """What the multi-token-prediction modules add besides their transformer layers (layer indices ``layers`` on,
    :func:`layer_params`): per module the norms of the hidden state and of the next token's embedding and the
    projection of their concatenation 2h -> h (the HF DeepSeek-V3 checkpoint's enorm, hnorm, eh_proj; the embedding
    and output layer are shared with the main model). Megatron shards the projection like a column-parallel
    linear."""
    out: list[ParamTensor] = []
    for k in range(model.mtp_layers):
        out += _norm(f"mtp{k}.enorm", model.hidden, model, "mtp") + _norm(f"mtp{k}.hnorm", model.hidden, model, "mtp")
        out += _linear(f"mtp{k}.eh_proj", 2 * model.hidden, model.hidden, False, "tp", "mtp")
    return out


def param_counts(model: ModelSpec) -> dict[str, int]:
    """Parameters per component over the whole model, plus ``total`` and ``active`` (per token, MoE).

    Components: embedding, attention, mlp (dense FFN and the pre-FFN norm), router, experts, shared_experts,
    final_norm, output_layer. ``active`` counts top_k routed experts instead of all of them. ``mtp`` (models with
    multi-token-prediction modules) is outside ``total``.
    """
    counts: dict[str, int] = {}
    tensors = embedding_params(model) + head_params(model)
    for i in range(model.layers):
        tensors += layer_params(model, i)
    for t in tensors:
        counts[t.component] = counts.get(t.component, 0) + t.numel
    counts["total"] = sum(t.numel for t in tensors)
    if model.mtp_layers:  # listed apart: published sizes count the main model (DeepSeek-V3: 671B + 14B MTP)
        counts["mtp"] = sum(t.numel for t in mtp_head_params(model)) + sum(
            t.numel for k in range(model.mtp_layers) for t in layer_params(model, model.layers + k))
    experts = counts.get("experts", 0)
    counts["active"] = counts["total"] - experts + (
        experts * model.moe.top_k // model.moe.experts if model.moe else 0)
    return counts
