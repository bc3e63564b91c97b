"""Activation bytes of one transformer layer, item by item: the tensors each op keeps for backward.

``framework: megatron`` follows Korthikanti et al., MLSys'23, Sec. 4 and Table 2 (fused kernels; per layer
34*s*b*h + 5*a*s^2*b bytes with 16-bit activations and 1-byte dropout masks, and its TP/SP/selective/full variants).
``framework: pytorch`` counts what plain PyTorch modules save: nn.Linear its input, GeLU/SiLU their input, a mul
both operands, norms their input plus fp32 statistics, SDPA (flash) q, k, v, output and the fp32 logsumexp; the
SDPA kernels write their output as (b, s, heads, d), so the transpose+reshape before o_proj is a view of it (one
tensor); K/V are expanded to all heads (repeat_kv) before SDPA unless the profile says ``sdpa_gqa``; no dropout
tensors when p = 0. Under eager AMP the residual stream is fp32 (an fp32 embedding plus 16-bit GEMM outputs), so
norms keep fp32 inputs; the profile's ``norm: upcast`` (Hugging Face's RMSNorm) and ``separate_projections`` add
what those implementations keep (:func:`norm_input_items`, :func:`amp_casts`). Checked tensor by tensor with
``torch.autograd.graph.saved_tensors_hooks`` on CPU (docs/memory_features.md, "What eager layers keep").

Symbols: s sequence, b micro-batch, h hidden, a heads, t tp, T = b*s/(cp*ulysses) tokens per rank, r = T*h/t with
sp else T*h (the "replicated region" of Megatron: norms, dropout, the input of column-parallel GEMMs).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.caching import memo
from simulator.implementation.profiles import profile_named
from simulator.model.shape import RankShape
from simulator.model.spec import ModelSpec
from simulator.plan.shape import rank_shape

LSE_BYTES = 4   # flash attention keeps an fp32 logsumexp per query row and head
MASK_BYTES = 1  # a dropout mask is one byte per element
PROB_BYTES = 4  # router probabilities are kept in fp32
FP32_BYTES = 4


@dataclass(frozen=True, slots=True)
class ActContext:
    """Everything the per-layer accounting needs besides the model: the rank's share of the layer (the plan's
    resolved :class:`~simulator.model.shape.RankShape`) and the recipe's accounting choices."""

    shape: RankShape
    recompute: str = "none"
    attention: str = "unfused"
    pytorch_layout: bool = False  # what plain PyTorch modules save (the recipe's eager accounting); else Megatron's
    dtype_bytes: int = 2
    moe_load: str = "expected"   # expected | worst (dropless) ; capacity factor comes from the model
    recompute_modules: frozenset[str] | None = None  # selective: Megatron --recompute-modules; None = core_attn
    selective_op: bool = False   # selective: torchtitan's per-op policy instead of Megatron's modules
    act_input_bytes: float | None = None   # the SwiGLU input's saved bytes per element (fp8 store: 1); None = dtype
    residual_bytes: int | None = None   # the residual stream's element bytes when not dtype_bytes (eager AMP: fp32)
    norm_upcast: bool = False   # RMSNorm written in eager ops that upcast (the profile's ``norm: upcast``)
    sdpa_gqa: bool = False      # plain PyTorch: SDPA gets K/V at their own head count (the profile's ``sdpa_gqa``)
    separate_projections: bool = False   # q, k, v and gate, up are separate Linear modules (the profile's)
    index_add_source: bool = False   # the experts' outputs are summed by index_add_, which keeps its source

    def recomputed(self, module: str) -> bool:
        """Whether selective recompute re-runs ``module`` in backward (so its inner tensors are not kept)."""
        return self.recompute == "selective" and module in (self.recompute_modules or {"core_attn"})

    @classmethod
    def build(cls, model: ModelSpec, seq_len: int, micro_batch: int, *, tp: int = 1, cp: int = 1, ulysses: int = 1,
              sp: bool = False, ep: int = 1, etp: int = 1, **settings) -> ActContext:
        """A context from raw degrees (tests and notebooks; plans pass their resolved shape)."""
        shape = rank_shape(model, seq_len, micro_batch, tp=tp, cp=cp, ulysses=ulysses, ep=ep, etp=etp, sp=sp)
        if "framework" in settings:     # an implementation profile's name: its family's accounting
            settings["pytorch_layout"] = profile_named(settings.pop("framework")).family == "pytorch"
        return cls(shape, **settings)

    @property
    def tokens(self) -> float:
        """T: tokens each rank holds outside attention."""
        return self.shape.tokens

    @property
    def rep(self) -> float:
        """Elements of one full-width tensor in the non-TP region: T*h/t with sp, else T*h (per unit h)."""
        return self.shape.norm_tokens


Item = tuple[str, float, str]


def _heads_per_rank(m: ModelSpec, c: ActContext) -> tuple[float, float]:
    """Query heads and K/V heads one rank holds inside attention (after TP and the Ulysses all-to-all).

    K/V heads are replicated when tp > kv_heads or kv_heads/tp < ulysses (Megatron-Core GQA; DeepSpeed-Ulysses).
    """
    q, kv = c.shape.heads, c.shape.kv_heads
    if c.pytorch_layout and not c.sdpa_gqa:
        kv = q                                   # repeat_kv expands K/V to every query head before SDPA
    return q, kv


def _attention_core(m: ModelSpec, c: ActContext) -> list[Item]:
    """Q, K, V kept for Q K^T and P V, and the s x s tensors (unfused) or the logsumexp (flash)."""
    d, dv, by = m.dhead, m.dhead_v, c.dtype_bytes
    q_heads, kv_heads = _heads_per_rank(m, c)
    rows = c.shape.micro_batch * c.shape.seq_len / c.shape.cp                # query rows per head on this rank (full over ulysses)
    items: list[Item] = [
        ("attn.q", by * rows * q_heads * d, f"{by}*b*s/cp*(a/(t*u))*d_head  [Q for QK^T]"),
        ("attn.k", by * rows * kv_heads * d, f"{by}*b*s/cp*kv_heads_per_rank*d_head  [K for QK^T]"),
        ("attn.v", by * rows * kv_heads * dv, f"{by}*b*s/cp*kv_heads_per_rank*d_v  [V for PV]"),
    ]
    if c.pytorch_layout:
        items.append(("attn.sdpa_out", by * rows * q_heads * dv, f"{by}*T*a*d_v/t  [SDPA output]"))
    if c.attention == "flash" or c.recomputed("core_attn"):
        if c.attention == "flash":
            items.append(("attn.lse", LSE_BYTES * rows * q_heads, f"{LSE_BYTES}*b*s/cp*a/(t*u)  [flash logsumexp]"))
        return items
    s2 = rows * q_heads * c.shape.seq_len                       # b * (a/t) * (s/cp) * s score elements
    items.append(("attn.softmax_out", by * s2, f"{by}*a*s^2*b/t  [softmax output]"))
    if m.dropout > 0:
        items.append(("attn.softmax_dropout_mask", MASK_BYTES * s2, f"{MASK_BYTES}*a*s^2*b/t  [dropout mask]"))
        items.append(("attn.softmax_dropout_out", by * s2, f"{by}*a*s^2*b/t  [dropout output, PV input]"))
    return items


def _attention_block(m: ModelSpec, c: ActContext) -> list[Item]:
    by, h, r, tok = c.dtype_bytes, m.hidden, c.rep, c.tokens
    gathered = tok if c.pytorch_layout else r    # Megatron keeps the SP shard and re-gathers in backward
    items: list[Item] = norm_input_items(m, c, "attn")
    if not c.recomputed("layernorm"):
        n = amp_casts(c, 3)
        items.append(("attn.qkv_in", n * by * gathered * h, f"{n}*{by}*r*h  [QKV GEMM input" +
                      (", autocast's bf16 copy per projection]" if n > 1 else "]")))
    if m.mla is not None:
        ml = m.mla
        if ml.q_lora_rank:
            items.append(("attn.q_latent", by * tok * ml.q_lora_rank, f"{by}*T*q_lora_rank  [q_b input]"))
        items.append(("attn.kv_latent", by * tok * ml.kv_lora_rank, f"{by}*T*kv_lora_rank  [kv_b input]"))
    core = _attention_core(m, c)
    if m.mla is not None and c.recomputed("mla_up_proj"):
        core = [i for i in core if i[0] not in ("attn.q", "attn.k", "attn.v")]  # rebuilt from the latents
    items += core
    if not (c.pytorch_layout and c.attention == "flash"):   # SDPA's output is o_proj's input (one storage)
        items.append(("attn.proj_in", by * tok * m.heads * m.dhead_v / c.shape.tp,
                      f"{by}*T*a*d_v/t  [output projection input]"))
    if m.dropout > 0:
        items.append(("attn.dropout_mask", MASK_BYTES * r * h, f"{MASK_BYTES}*r*h  [dropout mask]"))
    if c.pytorch_layout:
        items += _norm_stats(m, c, "attn")
    return items


def amp_casts(c: ActContext, projections: int) -> int:
    """Copies of a norm's output the following GEMMs keep: one, except under eager AMP with separate projections
    (q, k, v; gate, up: ``separate_projections``), where autocast casts the fp32 norm output once per Linear."""
    return projections if c.pytorch_layout and c.residual_bytes and c.separate_projections else 1


def norm_input_items(m: ModelSpec, c: ActContext, where: str) -> list[Item]:
    """What a pre-norm keeps of its input: Megatron's and fused norms the input (16-bit, or the fp32 residual
    stream of eager AMP, whose embedding and residual adds stay in fp32); Hugging Face's RMSNorm in eager ops
    (``norm_upcast``: ``x.to(float32)``, ``pow``, ``x * rsqrt``, ``weight * x.to(input_dtype)``; transformers
    LlamaRMSNorm / Qwen2RMSNorm) its fp32 input (a copy of a 16-bit one) and the normalized tensor before the
    weight multiply (fp32 under AMP, else the input's dtype)."""
    by, r, h = c.dtype_bytes, c.rep, m.hidden
    if not c.pytorch_layout:
        return [(f"{where}.norm_in", by * r * h, f"{by}*r*h  [norm input]")]
    rb = c.residual_bytes or by
    if not (c.norm_upcast and m.norm == "rmsnorm"):
        return [(f"{where}.norm_in", rb * r * h, f"{rb}*r*h  [norm input]")]
    return [(f"{where}.norm_in", FP32_BYTES * r * h, f"{FP32_BYTES}*r*h  [fp32 norm input (upcast)]"),
            (f"{where}.norm_normed", rb * r * h, f"{rb}*r*h  [normalized, before the weight multiply]")]


def _norm_stats(m: ModelSpec, c: ActContext, where: str) -> list[Item]:
    n = 2 if m.norm == "layernorm" else 1
    return [(f"{where}.norm_stats", 4 * n * c.rep, f"{4 * n}*T  [fp32 {'mean and rstd' if n == 2 else 'rstd'}]")]


def mlp_core_items(m: ModelSpec, c: ActContext, tokens: float, ffn: float, width_div: int, prefix: str) -> list[Item]:
    """Activation input and fc2 input of an MLP of width ``ffn`` over ``tokens`` rows (sharded by ``width_div``)."""
    by, f = c.dtype_bytes, ffn / width_div
    if not m.glu:
        return [(f"{prefix}.act_in", by * tokens * f, f"{by}*T*f/t  [GeLU input]"),
                (f"{prefix}.fc2_in", by * tokens * f, f"{by}*T*f/t  [fc2 input]")]
    if not c.pytorch_layout:
        ab = by if c.act_input_bytes is None else c.act_input_bytes
        return [(f"{prefix}.act_in", ab * tokens * 2 * f, f"{ab:g}*T*2f/t  [SwiGLU input: gate and up]"),
                (f"{prefix}.fc2_in", by * tokens * f, f"{by}*T*f/t  [fc2 input]")]
    return [(f"{prefix}.silu_in", by * tokens * f, f"{by}*T*f/t  [SiLU input (gate)]"),
            (f"{prefix}.silu_out", by * tokens * f, f"{by}*T*f/t  [mul operand]"),
            (f"{prefix}.up_out", by * tokens * f, f"{by}*T*f/t  [mul operand]"),
            (f"{prefix}.fc2_in", by * tokens * f, f"{by}*T*f/t  [down input]")]


def _routed_tokens(m: ModelSpec, c: ActContext) -> tuple[float, str]:
    """Tokens this rank's experts process: expected T_in*k*etp (balanced), worst case (dropless: every token of
    the EP x ETP group picks this rank's experts) or padded to the capacity factor."""
    moe = m.moe
    assert moe is not None  # internal
    t_in, expected = c.shape.norm_tokens, c.shape.routed_rows
    if moe.capacity_factor is not None:
        return moe.capacity_factor * expected, "capacity_factor*T_in*k*etp (padded)"
    if c.moe_load == "worst":
        return t_in * c.shape.etp * c.shape.ep * min(moe.top_k, moe.experts / c.shape.ep), "T_in*etp*ep*min(k, E/ep) (worst case)"
    return expected, "T_in*k*etp (expected, balanced)"


def _moe_block(m: ModelSpec, c: ActContext) -> list[Item]:
    moe = m.moe
    assert moe is not None  # internal
    by, h = c.dtype_bytes, m.hidden
    t_in = c.shape.norm_tokens
    routed, how = _routed_tokens(m, c)
    router_in = ("moe.router_in", by * c.rep * h, f"{by}*r*h  [router and shared-expert input]")
    if c.recomputed("moe"):
        return [router_in]                       # the whole MoE block is re-run from its input
    items: list[Item] = [] if c.recomputed("layernorm") else [router_in]
    items += [
        ("moe.router_probs", PROB_BYTES * t_in * moe.experts, f"{PROB_BYTES}*T_in*E  [fp32 router probabilities]"),
        ("moe.experts.fc1_in", by * routed * h, f"{by}*R*h, R = {how}  [permuted tokens]"),
    ]
    expert_core = mlp_core_items(m, c, routed, moe.expert_ffn_hidden, c.shape.etp, "moe.experts")
    if c.recomputed("moe_act"):                  # the activation output (fc2 input) is rebuilt from its input
        expert_core = [i for i in expert_core if not i[0].endswith(".fc2_in")]
    items += expert_core
    items.append(("moe.experts.out", by * routed * h, f"{by}*R*h  [expert output kept for the probability gradient]"))
    if c.index_add_source:   # index_add_'s backward, source.grad = grad.index_select(...).expand_as(source)
        items.append(("moe.experts.index_add_src", by * routed * h,
                      f"{by}*R*h  [weighted expert output, kept by index_add_ for expand_as]"))
    if moe.shared_ffn and not c.recomputed("shared_experts"):
        items += mlp_core_items(m, c, c.tokens, moe.shared_ffn, c.shape.tp, "moe.shared")
    return items


def _mlp_block(m: ModelSpec, c: ActContext, moe_layer: bool) -> list[Item]:
    by, h, r = c.dtype_bytes, m.hidden, c.rep
    items: list[Item] = norm_input_items(m, c, "mlp")
    if moe_layer:
        items += _moe_block(m, c)
    else:
        fc1_in = c.tokens if c.pytorch_layout else r
        if not c.recomputed("layernorm") or c.recomputed("mlp"):   # the MLP checkpoint keeps its input
            n = amp_casts(c, 2 if m.glu else 1)
            items.append(("mlp.fc1_in", n * by * fc1_in * h, f"{n}*{by}*r*h  [fc1 input" +
                          (", autocast's bf16 copy per projection]" if n > 1 else "]")))
        if not c.recomputed("mlp"):
            items += mlp_core_items(m, c, c.tokens, m.ffn, c.shape.tp, "mlp")
    if m.dropout > 0:
        items.append(("mlp.dropout_mask", MASK_BYTES * r * h, f"{MASK_BYTES}*r*h  [dropout mask]"))
    if c.pytorch_layout:
        items += _norm_stats(m, c, "mlp")
    return items


# torchtitan's per-op selective activation checkpointing (``parallel.selective_ac_option: op``): what one dense
# transformer layer keeps for backward.
#
# torchtitan ``SelectiveAC`` (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py at b5bcd76c; older
# releases: ``activation_checkpoint.mode: selective``, ``selective_ac_option: op`` and ``_save_list``) wraps each
# block in ``checkpoint_wrapper`` with a selective-checkpoint policy: the outputs of the ops in its save set are kept
# (MUST_SAVE), everything else is recomputed in backward. The save set is the compiler's compute-intensive ops
# (``torch._functorch.partitioners.get_default_op_list``: mm, addmm, bmm, the SDPA flash / efficient kernels, ...),
# ``aten.linear``, the SDPA variants, ``aten.max`` (fp8 amax), ``topk`` and the reduce-scatter / all-to-all
# collectives, except that every second ``aten.mm`` / ``aten.linear`` of a block's forward is recomputed (the count
# restarts with each block's forward). A biased projection runs as ``aten.addmm``, which the policy saves without
# counting. So a Llama block (wq, wk, wv, wo, w1, w3, w2 in forward order; the FFN computes w1 before w3) keeps the
# block input (the checkpoint's input), the outputs of wq, wv, w1 and w2, and SDPA's output and fp32 logsumexp;
# norms, RoPE, SiLU, the product and wk, wo, w3 are recomputed. Plain-PyTorch layers (``framework: pytorch``) at
# tp 1, cp 1 and without MoE or MLA (whose ops the policy treats otherwise: router gate forced to recompute, topk and
# all-to-all saved, grouped GEMMs not in the set).


def _projections(m: ModelSpec) -> list[tuple[str, float, bool]]:
    """(name, output width, biased) of the layer's projections in forward order."""
    qkv_bias, bias = m.has_qkv_bias, m.linear_bias
    rows = [("wq", m.heads * m.dhead, qkv_bias), ("wk", m.kv * m.dhead, qkv_bias),
            ("wv", m.kv * m.dhead_v, qkv_bias), ("wo", m.hidden, bias)]
    if m.glu:
        rows += [("w1", m.ffn, bias), ("w3", m.ffn, bias), ("w2", m.hidden, bias)]
    else:
        rows += [("w1", m.ffn, bias), ("w2", m.hidden, bias)]
    return rows


def op_sac_items(m: ModelSpec, c: ActContext) -> list[Item]:
    """(name, bytes, formula) of what one layer keeps under torchtitan's op-level selective checkpointing (the
    comment above), for one micro-batch: T tokens, element bytes ``c.dtype_bytes``."""
    by, tok = c.dtype_bytes, c.tokens
    items: list[Item] = [("layer_input", by * tok * m.hidden, f"{by}*T*h  [checkpointed block input]")]
    count = 0
    for name, width, biased in _projections(m):
        if not biased:
            count += 1
            if count % 2 == 0:
                continue                                  # every second mm is recomputed
        items.append((f"sac.{name}_out", by * tok * width, f"{by}*T*{width}  [{name} output, saved"
                      f"{' (addmm)' if biased else f' (mm #{count})'}]"))
    rows = tok                                            # query rows (cp 1, tp 1)
    items.append(("sac.sdpa_out", by * rows * m.heads * m.dhead_v, f"{by}*T*a*d_v  [SDPA output, saved]"))
    items.append(("sac.sdpa_lse", LSE_BYTES * rows * m.heads, f"{LSE_BYTES}*T*a  [SDPA fp32 logsumexp, saved]"))
    return items


def layer_activation_items(m: ModelSpec, c: ActContext, *, moe_layer: bool = False) -> list[Item]:
    """(name, bytes, formula) of every tensor one layer keeps for backward, for one micro-batch on one GPU.

    Full recompute keeps only the layer input (2*s*b*h, /t with sp: Megatron checkpoints the SP shard).
    """
    if c.recompute == "selective" and c.selective_op:
        return op_sac_items(m, c)
    if c.recompute == "full":
        by = (c.residual_bytes or c.dtype_bytes) if c.pytorch_layout else c.dtype_bytes
        return [("layer_input", by * c.rep * m.hidden, f"{by}*r*h  [checkpointed layer input, full recompute]")]
    return _attention_block(m, c) + _mlp_block(m, c, moe_layer)


def layer_activation_bytes(m: ModelSpec, c: ActContext, *, moe_layer: bool = False) -> float:
    """Sum of :func:`layer_activation_items`: bytes one layer keeps for one micro-batch on one GPU."""
    return sum(b for _, b, _ in layer_activation_items(m, c, moe_layer=moe_layer))


@memo(maxsize=4096)
def cached_layer_items(m: ModelSpec, c: ActContext, moe_layer: bool) -> tuple[Item, ...]:
    """:func:`layer_activation_items` as a tuple, once per (model, context, FFN kind): a pure function of hashable
    arguments that plans of a sweep or search share."""
    return tuple(layer_activation_items(m, c, moe_layer=moe_layer))


@memo(maxsize=4096)
def cached_layer_bytes(m: ModelSpec, c: ActContext, moe_layer: bool) -> float:
    """:func:`layer_activation_bytes`, cached as :func:`cached_layer_items` (the same sum, in the same order)."""
    return sum(b for _, b, _ in cached_layer_items(m, c, moe_layer))
