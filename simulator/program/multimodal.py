"""Programs of the modules a multimodal model adds to the single-stack engine (docs/multimodal.md): a CoCa
decoder's cross-attention block, the attentional pooler, LLaVA's projector and the contrastive loss's logits. Pure
functions from the module's sizes (elements), the tower's :class:`~simulator.plan.Batch` and its TP degree to a
frozen :class:`~simulator.program.LayerProgram` of training GEMMs, priced by :mod:`simulator.pricing.compute` like
every other program.

Each forward GEMM comes with its backward: two GEMMs of the forward's FLOPs (a linear layer's data and weight
gradients; the two gradients of a score or logits product), recorded at the forward GEMM's (m, k, n), so a
module's backward costs twice its forward at the engine's GEMM efficiency (the rule these modules have always been
priced by; the transposed shapes of :func:`simulator.model.flops` would read the efficiency fit elsewhere).

Dtypes, decided here and recorded on each op: the linear projections in the plan's GEMM dtype
(:meth:`simulator.plan.ResolvedPlan.gemm_dtype`), the attention scores and values and the contrastive logits in
:func:`~simulator.program.build.attention_dtype` (16 bits under fp8 / fp4: Transformer Engine quantizes its linear
layers only; OpenCLIP's loss is a plain matmul).
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.plan import Batch
from simulator.plan.shape import heads_per_rank
from simulator.program.build import attention_dtype
from simulator.program.ops import Gemm, GemmPhase, LayerProgram, ProgramKind

#: backward phases of a linear layer's forward GEMM (data and weight gradient) and of a product of two activations
#: (the gradient of each operand)
_LINEAR_BWD: tuple[GemmPhase, GemmPhase] = ("bwd_dgrad", "bwd_wgrad")
_PRODUCT_BWD: tuple[GemmPhase, GemmPhase] = ("bwd_dgrad", "bwd_dgrad")


def _training(forward: Iterable[tuple[Gemm, tuple[GemmPhase, GemmPhase]]]) -> tuple[Gemm, ...]:
    """The forward GEMMs in order, then each one's two backward GEMMs (module docstring) named ``<name>.d0/d1``."""
    fwd = list(forward)
    bwd = [Gemm(f"{g.name}.d{i}", phases[i], g.m, g.k, g.n, g.batch, g.density, g.dtype, g.kernel)
           for i in range(2) for g, phases in fwd]
    return tuple(g for g, _ in fwd) + tuple(bwd)


def _program(kind: ProgramKind, gemms: tuple[Gemm, ...]) -> LayerProgram:
    fwd = sum(g.flops for g in gemms if g.phase == "fwd")
    return LayerProgram(kind=kind, gemms=gemms, fwd_flops=fwd, bwd_flops=sum(g.flops for g in gemms) - fwd)


def attention_gemms(prefix: str, sequences: int, queries: float, keys: float, hidden: int, key_hidden: int,
                    heads: int, tp: int, dtype: str, mlp: int = 0, mlp_up: int = 1
                    ) -> list[tuple[Gemm, tuple[GemmPhase, GemmPhase]]]:
    """Forward GEMMs of one attention block on one TP rank for ``sequences`` samples, T = ``queries`` tokens of
    width h attending to N = ``keys`` tokens of width h_v (heads / tp heads of d = h / heads), each with its
    backward phases: Q and O projections (bT x h x h/t, bT x h/t x h), K and V of the key tokens (bN x h_v x h/t
    each), the scores Q K^T (b heads/t GEMMs of T x d x N) and the values P V (T x N x d). Forward FLOPs
    (4 bT h^2 + 4 bN h_v h + 4 bT N h) / t. With an MLP of width f = ``mlp`` (OpenCLIP's cross-attention block):
    ``mlp_up`` up-projections bT x h x f/t (2 for SwiGLU) and the down-projection bT x f/t x h."""
    b, T, N, h, hv = sequences, queries, keys, hidden, key_hidden
    d, local, core = h / heads, heads_per_rank(heads, tp), attention_dtype(dtype)
    ops = [(Gemm(f"{prefix}.q", "fwd", b * T, h, h / tp, 1, dtype=dtype), _LINEAR_BWD),
           (Gemm(f"{prefix}.o", "fwd", b * T, h / tp, h, 1, dtype=dtype), _LINEAR_BWD),
           (Gemm(f"{prefix}.k", "fwd", b * N, hv, h / tp, 1, dtype=dtype), _LINEAR_BWD),
           (Gemm(f"{prefix}.v", "fwd", b * N, hv, h / tp, 1, dtype=dtype), _LINEAR_BWD),
           (Gemm(f"{prefix}.qk", "fwd", T, d, N, b * local, dtype=core), _PRODUCT_BWD),
           (Gemm(f"{prefix}.pv", "fwd", T, N, d, b * local, dtype=core), _PRODUCT_BWD)]
    if mlp:
        ops += [(Gemm(f"{prefix}.mlp.up{i}", "fwd", b * T, h, mlp / tp, 1, dtype=dtype), _LINEAR_BWD)
                for i in range(mlp_up)]
        ops.append((Gemm(f"{prefix}.mlp.down", "fwd", b * T, mlp / tp, h, 1, dtype=dtype), _LINEAR_BWD))
    return ops


def cross_attention_program(batch: Batch, image_tokens: int, hidden: int, image_hidden: int, heads: int, tp: int,
                            dtype: str, mlp: int = 0, mlp_up: int = 1) -> LayerProgram:
    """One cross-attention block of a CoCa multimodal decoder for one micro-batch on one TP rank: the micro-batch's
    text tokens (``batch.new`` per sequence) attend to ``image_tokens`` of width ``image_hidden``
    (:func:`attention_gemms`), forward and backward."""
    return _program("cross_attention", _training(attention_gemms(
        "cross_attn", batch.sequences, batch.new, image_tokens, hidden, image_hidden, heads, tp, dtype, mlp, mlp_up)))


def pooler_program(batch: Batch, query_counts: Iterable[int], tokens: int, width: int, hidden: int, heads: int,
                   tp: int, dtype: str) -> LayerProgram:
    """The attentional pooler(s) of a CoCa image encoder for one micro-batch on one TP rank: per pooler, its q
    learned queries of width ``width`` attend to the encoder's ``tokens`` of width ``hidden``
    (:func:`attention_gemms`, no MLP), forward and backward. OpenCLIP coca_ViT-L-14, one sample forward:
    4 q w^2 + 4 N h_v w + 4 q N w = 1.615 GFLOP."""
    ops = [op for i, q in enumerate(query_counts)
           for op in attention_gemms(f"pooler{i}", batch.sequences, q, tokens, width, hidden, heads, tp, dtype)]
    return _program("pooler", _training(ops))


def projector_program(tokens: float, input_width: int, hidden: int, output_width: int, tp: int, dtype: str
                      ) -> LayerProgram:
    """LLaVA's two-layer MLP projector over ``tokens`` image tokens on one TP rank (tokens x h_in x h/t, then
    tokens x h x out/t), forward and backward."""
    return _program("projector", _training([
        (Gemm("projector.fc1", "fwd", tokens, input_width, hidden / tp, 1, dtype=dtype), _LINEAR_BWD),
        (Gemm("projector.fc2", "fwd", tokens, hidden, output_width / tp, 1, dtype=dtype), _LINEAR_BWD)]))


def contrastive_logits_program(local_rows: float, embed_dim: int, batch: int, dtype: str) -> LayerProgram:
    """The logits of a contrastive loss on one loss rank (:class:`simulator.multimodal.loss.ContrastiveCost`): the
    image->text and text->image products (b x e) @ (e x B), 4 b B e FLOPs forward, and their gradients, in
    :func:`~simulator.program.build.attention_dtype`."""
    core = attention_dtype(dtype)
    return _program("contrastive_loss", _training(
        (Gemm(f"logits.{name}", "fwd", local_rows, embed_dim, batch, 1, dtype=core), _PRODUCT_BWD)
        for name in ("image_text", "text_image")))
