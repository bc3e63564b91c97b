"""Matmul FLOPs of one transformer layer, op by op with GEMM shapes, and whole-model FLOP counts.

The step-time engine times each GEMM, so :func:`layer_flops` returns named ops with their (m, k, n) shapes on one
GPU (after TP/CP/Ulysses/EP sharding), for forward and for backward (data gradient and weight gradient GEMMs),
not only totals. A GEMM C[m, n] = A[m, k] @ B[k, n] costs 2*m*k*n FLOPs (one multiply and one add).

Backward of Y = X W (X: [m, k], W: [k, n]) is two GEMMs: dX = dY W^T with shape (m, n, k) and dW = X^T dY with
shape (k, m, n); so backward is twice forward (Narayanan et al., SC'21, Sec. 5.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.caching import memo
from simulator.model.shape import RankShape
from simulator.model.spec import ModelSpec

Phase = Literal["fwd", "bwd_dgrad", "bwd_wgrad", "bwd_recompute"]
CAUSAL_FRACTION = 0.5
"""Share of the s x s score matrix a causal kernel computes (flash attention skips masked tiles; the diagonal
blocks make it (s + block)/(2s), which we round to 1/2)."""


@dataclass(frozen=True, slots=True)
class GemmOp:
    """One (batched) GEMM on one GPU: ``batch`` products of [m, k] x [k, n]; ``density`` < 1 for causal masks."""

    name: str
    phase: Phase
    m: int | float
    k: int | float
    n: int | float
    batch: int | float = 1
    density: float = 1.0

    @property
    def flops(self) -> float:
        """2 * m * k * n * batch * density FLOPs."""
        return 2.0 * self.m * self.k * self.n * self.batch * self.density


@dataclass(frozen=True, slots=True)
class LayerFlops:
    """Ops of one layer on one GPU; totals by phase."""

    ops: tuple[GemmOp, ...]

    @property
    def forward_flops(self) -> float:
        return sum(o.flops for o in self.ops if o.phase == "fwd")

    @property
    def backward_flops(self) -> float:
        """Model backward FLOPs (data + weight gradients), excluding flash attention's recomputation."""
        return sum(o.flops for o in self.ops if o.phase in ("bwd_dgrad", "bwd_wgrad"))

    @property
    def recompute_flops(self) -> float:
        """FLOPs the kernel re-executes in backward (flash attention recomputes the scores)."""
        return sum(o.flops for o in self.ops if o.phase == "bwd_recompute")


def _linear(name: str, m: float, k: float, n: float, batch: float = 1) -> list[GemmOp]:
    """Forward GEMM of a linear layer and its two backward GEMMs."""
    return [GemmOp(name, "fwd", m, k, n, batch), GemmOp(f"{name}.dgrad", "bwd_dgrad", m, n, k, batch),
            GemmOp(f"{name}.wgrad", "bwd_wgrad", k, m, n, batch)]


def window_density(seq_len: float, window: int | None) -> float:
    """Share of the s x s score matrix a causal kernel computes: 1/2 (``CAUSAL_FRACTION``), or with a sliding
    window of w keys (each query attends the w most recent tokens, itself included) the pairs 0 <= i - j < w:
    sum over queries of min(i + 1, w) = w*s - w*(w - 1)/2, over s^2 (flash kernels skip the tiles outside the band;
    Beltagy et al. 2020, Longformer, Sec. 3; Mistral 7B, Jiang et al. 2023, Sec. 2)."""
    if window is None or window >= seq_len:
        return CAUSAL_FRACTION
    return (window * seq_len - window * (window - 1) / 2) / seq_len**2


def _core_attention(model: ModelSpec, b: int, s_q: float, s_k: float, heads: float, causal: bool,
                    attention: str, window: int | None = None) -> list[GemmOp]:
    """S = Q K^T and O = P V per head, and their backward (dQ, dK, dP, dV); flash recomputes S in backward.
    ``window``: a causal sliding window (:func:`window_density`).

    Source: 4*b*s^2*h forward FLOPs of attention (Korthikanti et al. 2023, App. A; Narayanan et al. 2021 Eq. 3).
    """
    d, dv, rho = model.dhead, model.dhead_v, window_density(s_k, window) if causal else 1.0
    bh = b * heads
    ops = [GemmOp("attn.qk", "fwd", s_q, d, s_k, bh, rho), GemmOp("attn.pv", "fwd", s_q, s_k, dv, bh, rho),
           GemmOp("attn.qk.dq", "bwd_dgrad", s_q, s_k, d, bh, rho),
           GemmOp("attn.qk.dk", "bwd_dgrad", s_k, s_q, d, bh, rho),
           GemmOp("attn.pv.dp", "bwd_dgrad", s_q, dv, s_k, bh, rho),
           GemmOp("attn.pv.dv", "bwd_dgrad", s_k, s_q, dv, bh, rho)]
    if attention == "flash":
        ops.append(GemmOp("attn.qk.recompute", "bwd_recompute", s_q, d, s_k, bh, rho))
    return ops


def _attention_projections(model: ModelSpec, sh: RankShape) -> list[GemmOp]:
    h, t = model.hidden, sh.tokens
    if model.mla is not None:
        m = model.mla
        ops: list[GemmOp] = []
        if m.q_lora_rank is None:
            ops += _linear("q_proj", t, h, sh.heads_tp * m.qk_head_dim)
        else:
            ops += _linear("q_a_proj", t, h, m.q_lora_rank)
            ops += _linear("q_b_proj", t, m.q_lora_rank, sh.heads_tp * m.qk_head_dim)
        ops += _linear("kv_a_proj", t, h, m.kv_lora_rank + m.qk_rope_head_dim)
        ops += _linear("kv_b_proj", t, m.kv_lora_rank, sh.heads_tp * (m.qk_nope_head_dim + m.v_head_dim))
        return ops + _linear("o_proj", t, sh.heads_tp * m.v_head_dim, h)
    d = model.dhead
    return (_linear("q_proj", t, h, sh.heads_tp * d) + _linear("k_proj", t, h, sh.kv_heads_tp * d)
            + _linear("v_proj", t, h, sh.kv_heads_tp * d) + _linear("o_proj", t, sh.heads_tp * d, h))


def _mlp(model: ModelSpec, t: float, ffn: float, tp: int, prefix: str = "mlp", batch: float = 1) -> list[GemmOp]:
    fc1_out = 2 * ffn if model.glu else ffn
    return _linear(f"{prefix}.fc1", t, model.hidden, fc1_out / tp, batch) + _linear(
        f"{prefix}.fc2", t, ffn / tp, model.hidden, batch)


def expert_mlp_ops(model: ModelSpec, rows: float, etp: int = 1, batch: float = 1) -> list[GemmOp]:
    """GEMMs of ``batch`` routed experts that each multiply ``rows`` tokens (expert FFN sharded over ``etp``)."""
    assert model.moe is not None  # internal
    return _mlp(model, rows, model.moe.expert_ffn_hidden, etp, prefix="experts", batch=batch)


def _moe(model: ModelSpec, sh: RankShape) -> list[GemmOp]:
    """Router on this rank's tokens; routed experts as a grouped GEMM over the local experts (expected load)."""
    assert model.moe is not None  # internal
    moe = model.moe
    ops = _linear("router", sh.norm_tokens, model.hidden, moe.experts)
    ops += expert_mlp_ops(model, sh.rows_per_expert, sh.etp, batch=sh.local_experts)
    if moe.shared_ffn:
        ops += _mlp(model, sh.tokens, moe.shared_ffn, sh.tp, prefix="shared_experts")
    return ops


def layer_flops(model: ModelSpec, shape: RankShape, *, layer_index: int = 0, causal: bool = True,
                attention: Literal["flash", "unfused"] = "flash") -> LayerFlops:
    """GEMMs of layer ``layer_index`` on one GPU for one micro-batch, forward and backward.

    Args:
        model: the architecture.
        shape: the rank's share of the layer (:func:`simulator.plan.shape.rank_shape`; the plan's
            ``ResolvedPlan.shape``); GEMM shapes are those one rank executes. Sequence parallelism only changes the
            router's token count: projections see the gathered sequence either way.
        layer_index: which layer (decides dense vs MoE FFN).
        causal: causal mask halves the score GEMMs (``CAUSAL_FRACTION``).
        attention: ``flash`` recomputes Q K^T in backward (an extra ``bwd_recompute`` op).

    Returns:
        LayerFlops; ``forward_flops`` for tp=cp=1, non-causal, GPT-style model equals 24*b*s*h^2 + 4*b*s^2*h
        (Korthikanti et al. 2023, App. A).
    """
    ops = _attention_projections(model, shape)
    ops += _core_attention(model, shape.micro_batch, shape.seq_len / shape.cp, shape.seq_len,
                           shape.heads, causal, attention, model.attention_window(layer_index))
    if model.is_moe_layer(layer_index):
        ops += _moe(model, shape)
    else:
        ops += _mlp(model, shape.tokens, model.ffn, shape.tp)
    return LayerFlops(tuple(ops))


def logits_flops(model: ModelSpec, shape: RankShape) -> LayerFlops:
    """Output layer GEMM (tokens x hidden x vocab/tp, the vocabulary the weights hold: ``RankShape.vocab_tp``),
    forward and backward: 2*b*s*h*v forward; each MTP module runs the shared output layer once more and first
    projects [norm(h); norm(emb)] (2h -> h/tp)."""
    ops = _linear("output_layer", shape.tokens, model.hidden, shape.vocab_tp, 1 + model.mtp_layers)
    if model.mtp_layers:
        ops += _linear("mtp.eh_proj", shape.tokens, 2 * model.hidden, model.hidden / shape.tp, model.mtp_layers)
    return LayerFlops(tuple(ops))


@memo(maxsize=256)   # a pure function of hashable arguments (a frozen model hashes by value)
def model_flops(model: ModelSpec, seq_len: int, batch: int, *, causal: bool = False,
                attention: Literal["flash", "unfused"] = "flash") -> float:
    """Model FLOPs of one iteration over ``batch`` sequences (forward + backward, no recomputation).

    With ``causal=False`` and a GPT model without MoE this equals 72*B*L*s*h^2*(1 + s/(6h) + v/(12hL))
    (Korthikanti et al. 2023, App. A), the convention MFU is quoted in.
    """
    total = 0.0
    for index, count in layer_kinds(model):
        f = layer_flops(model, RankShape.unsharded(model, seq_len, batch), layer_index=index, causal=causal,
                        attention=attention)
        total += count * (f.forward_flops + f.backward_flops)
    if model.mtp_layers:  # the MTP modules' layers (the last layer's kind)
        f = layer_flops(model, RankShape.unsharded(model, seq_len, batch), layer_index=model.layers, causal=causal,
                        attention=attention)
        total += model.mtp_layers * (f.forward_flops + f.backward_flops)
    lg = logits_flops(model, RankShape.unsharded(model, seq_len, batch))
    return total + lg.forward_flops + lg.backward_flops


def hardware_flops(model: ModelSpec, seq_len: int, batch: int, *, recompute: str = "none", causal: bool = False,
                   attention: Literal["flash", "unfused"] = "unfused") -> float:
    """FLOPs executed in one iteration, including recomputation.

    ``full`` adds one forward of every layer (not the output layer): 96*B*s*L*h^2*(1 + s/(6h) + v/(16Lh)) for GPT
    (Narayanan et al., SC'21, Eq. 3). ``selective`` adds the forward of the core attention (Q K^T and P V).
    ``attention='flash'`` adds the kernel's recomputation of Q K^T in backward.
    """
    total = model_flops(model, seq_len, batch, causal=causal, attention=attention)
    for index, count in layer_kinds(model):
        f = layer_flops(model, RankShape.unsharded(model, seq_len, batch), layer_index=index, causal=causal,
                        attention=attention)
        extra = f.recompute_flops
        if recompute == "full":
            extra += f.forward_flops
        elif recompute == "selective":
            extra += sum(o.flops for o in f.ops if o.phase == "fwd" and o.name.startswith("attn."))
        total += count * extra
    return total


def layer_kinds(model: ModelSpec) -> list[tuple[int, int]]:
    """(a representative layer index, how many layers share its shape): layers differ by dense vs MoE FFN and by
    their attention window."""
    return list(_layer_kinds(model))


@memo(maxsize=64)
def _layer_kinds(model: ModelSpec) -> tuple[tuple[int, int], ...]:
    """:func:`layer_kinds`, once per model (a frozen model hashes by value)."""
    groups: dict[tuple[bool, int | None], list[int]] = {}
    for i in range(model.layers):
        groups.setdefault((model.is_moe_layer(i), model.attention_window(i)), []).append(i)
    return tuple((members[0], len(members)) for members in groups.values())


def korthikanti_model_flops(batch: int, layers: int, seq_len: int, hidden: int, vocab: int) -> float:
    """72*B*L*s*h^2*(1 + s/(6h) + v/(12hL)): GPT model FLOPs per iteration (Korthikanti et al. 2023, App. A)."""
    return 72.0 * batch * layers * seq_len * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (12 * hidden * layers))


def korthikanti_hardware_flops_selective(batch: int, layers: int, seq_len: int, hidden: int, vocab: int) -> float:
    """72*B*L*s*h^2*(1 + s/(3h) + v/(12hL)): hardware FLOPs with selective recompute, as published
    (Korthikanti et al. 2023, App. A)."""
    return 72.0 * batch * layers * seq_len * hidden**2 * (
        1 + seq_len / (3 * hidden) + vocab / (12 * hidden * layers))


def narayanan_full_recompute_flops(batch: int, layers: int, seq_len: int, hidden: int, vocab: int) -> float:
    """96*B*s*L*h^2*(1 + s/(6h) + v/(16Lh)): FLOPs with full recompute (Narayanan et al., SC'21, Eq. 3)."""
    return 96.0 * batch * seq_len * layers * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden))
