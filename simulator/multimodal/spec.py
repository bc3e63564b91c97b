"""A multimodal model as named submodules (DistMM, Huang et al., NSDI'24, section 2): each submodule is a
transformer stack of its own with its own input length per sample, and a loss ties their outputs.

Roles: ``vision`` (a ViT: ``image_size`` / ``patch_size`` squared patch tokens, plus a class token), ``text`` (a
text transformer over ``tokens`` per sample), ``decoder`` (a text decoder; CoCa's multimodal decoder attends to the
image tokens through ``cross_attention_layers`` cross-attention blocks), ``llm`` (a LLaVA-style language model that
reads the projected image tokens in front of its text tokens). A submodule with ``input_from`` reads another
submodule's output token states instead of an input table of its own: CoCa (Yu et al. 2022, section 3.2) splits its
text decoder in two, a unimodal half (causal self-attention only; its [CLS] token gives the contrastive text
embedding) and a multimodal half (causal self-attention + cross-attention to the image tokens; captioning head)
that continues the unimodal half's token stream.

How a submodule runs on the existing single-stack engine (:meth:`SubmoduleSpec.engine_model`): the stack keeps its
layers, width, heads and FFN; the engine's input embedding and output layer (``vocab``) are replaced by the
submodule's output projection (``embed_dim`` rows, untied), so the engine times the projection GEMM over every token
(ViT-L/14: 2 x 257 x 1024 x 768 FLOPs per sample, 0.3% of its layers') and the real input table (the text
vocabulary, or the 3 p^2 x h patch embedding) is added back as parameters by :meth:`MultimodalSpec.extra_params`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.caching import memo
from simulator.errors import UserError
from simulator.model.spec import ModelSpec
from simulator.model.strict import build
from simulator.yamlio import fast_safe_load

_STRICT = ConfigDict(extra="forbid", frozen=True)

Role = Literal["vision", "text", "decoder", "llm"]
Loss = Literal["contrastive", "captioning", "contrastive+captioning", "lm"]


class ProjectorSpec(BaseModel):
    """LLaVA-1.5's MLP projector from the vision width to the LLM width (Liu et al. 2023, "Improved Baselines",
    section 3.2: two linear layers with a GELU)."""

    model_config = _STRICT

    input: int = Field(ge=1, description="width of the encoder's tokens")
    hidden: int = Field(ge=1, description="width of the hidden layer")
    output: int = Field(ge=1, description="width of the LLM's tokens")

    @property
    def params(self) -> float:
        """Weights and biases of the two linear layers."""
        return self.input * self.hidden + self.hidden + self.hidden * self.output + self.output

    def flops_per_token(self) -> float:
        """Forward FLOPs per token: 2 x (in x hidden + hidden x out)."""
        return 2.0 * (self.input * self.hidden + self.hidden * self.output)


class PoolerSpec(BaseModel):
    """CoCa's attentional pooler on the image encoder's output (Yu et al. 2022, section 3.2; OpenCLIP
    ``AttentionalPooler``): one multi-head attention layer whose ``queries`` learned queries of width ``width``
    attend to the encoder's tokens (keys and values projected from the encoder's width h_v), plus a norm on each side.
    ``contrastive``: ``first_query`` (OpenCLIP's CoCa, ``attentional_pool: true``: one pooler; its first output is
    the contrastive embedding and the other queries - 1 go to the decoder's cross-attention) or ``own_pooler`` (the
    paper's design, OpenCLIP's ``parallel`` mode: the ``queries`` tokens go to the decoder and a second pooler of
    one query gives the contrastive embedding)."""

    model_config = _STRICT

    queries: int = Field(ge=2, description="learned queries of the (generative) pooler")
    width: int = Field(ge=1, description="width of the pooled tokens (the decoder's cross-attention reads them)")
    heads: int = Field(ge=1, description="attention heads of the pooler")
    contrastive: Literal["first_query", "own_pooler"] = Field(
        description="first_query (OpenCLIP CoCa) | own_pooler (CoCa paper: a second pooler of one query)")

    @property
    def tokens_out(self) -> int:
        """Pooled tokens the decoder cross-attends: queries - 1 (the first is the contrastive embedding), or all."""
        return self.queries - 1 if self.contrastive == "first_query" else self.queries

    @property
    def query_counts(self) -> tuple[int, ...]:
        """Queries of each pooler: (queries,) or (queries, 1)."""
        return (self.queries,) if self.contrastive == "first_query" else (self.queries, 1)

    def params(self, context_width: int) -> float:
        """Parameters over keys and values of width h_v (torch ``nn.MultiheadAttention(w, kdim=h_v, vdim=h_v)`` as
        OpenCLIP builds it), per pooler: the queries (q w), the Q and O projections (2 w^2), K and V from h_v
        (2 h_v w), the four projections' biases (4 w), the query and key norms (2 w + 2 h_v). OpenCLIP coca_ViT-L-14
        (q 256, w 768, h_v 1024): 2,955,776."""
        w, hv = self.width, context_width
        return float(sum(q * w + 2 * w * w + 2 * hv * w + 4 * w + 2 * w + 2 * hv for q in self.query_counts))


class SubmoduleSpec(BaseModel):
    """One submodule: a transformer stack, its input length per sample and its output width."""

    model_config = _STRICT

    name: str = Field(description="label (vision, text, ...)")
    role: Role = Field(description="vision | text | decoder | llm (module docstring)")
    layers: int = Field(ge=1, description="transformer layers")
    hidden: int = Field(ge=1, description="width h")
    heads: int = Field(ge=1, description="attention heads")
    kv_heads: int | None = Field(None, ge=1, description="K/V heads (GQA); null = heads")
    ffn_hidden: int | None = Field(None, ge=1, description="MLP width; null = 4 h")
    activation: Literal["gelu", "swiglu"] = Field("gelu", description="MLP activation")
    norm: Literal["layernorm", "rmsnorm"] = Field("layernorm", description="normalization")
    image_size: int | None = Field(None, ge=1, description="vision: input resolution in pixels (square)")
    patch_size: int | None = Field(None, ge=1, description="vision: patch side in pixels")
    class_token: bool = Field(True, description="vision: a class token is prepended to the patches")
    tokens: int | None = Field(None, ge=1, description="text/decoder/llm: text tokens per sample")
    vocab: int | None = Field(None, ge=1, description="text/decoder/llm: vocabulary rows of the input embedding")
    embed_dim: int = Field(ge=1, description="output width: the contrastive embedding, or the vocabulary of an "
                                             "LM / captioning head")
    causal: bool = Field(False, description="causal self-attention (text decoders, LLMs)")
    cross_attention_layers: int = Field(0, ge=0, description="decoder: layers with a cross-attention block over the "
                                                             "image tokens (CoCa's multimodal decoder)")
    input_from: str | None = Field(None, description="text/decoder: the submodule whose output token states are this "
                                                     "one's input (CoCa's multimodal decoder reads the unimodal "
                                                     "decoder's); null = its own input table (vocab)")
    cross_attention_mlp: bool = Field(False, description="decoder: every cross-attention block is a full residual "
                                                         "block with an MLP of its own (OpenCLIP's CoCa "
                                                         "MultimodalTransformer); false = attention only (the CoCa "
                                                         "paper's decoder layer: its one MLP is the layer's)")
    attentional_pooler: PoolerSpec | None = Field(None, description="vision: CoCa's attentional pooler (PoolerSpec); "
                                                                    "the decoder cross-attends its output tokens")

    @model_validator(mode="after")
    def _check(self) -> SubmoduleSpec:
        if self.role == "vision":
            if self.image_size is None or self.patch_size is None:
                raise UserError("a vision submodule needs image_size and patch_size", key_path="image_size")
            if self.image_size % self.patch_size:
                raise UserError(f"image_size ({self.image_size}) is not a multiple of patch_size "
                                f"({self.patch_size})", key_path="patch_size")
        elif self.tokens is None or (self.vocab is None and self.input_from is None):
            raise UserError(f"a {self.role} submodule needs tokens and vocab (or input_from)", key_path="tokens")
        if self.input_from is not None and self.role == "vision":
            raise UserError("a vision submodule reads images, not another submodule's tokens (input_from)",
                            key_path="input_from")
        if self.attentional_pooler is not None and self.role != "vision":
            raise UserError("only a vision submodule has an attentional_pooler", key_path="attentional_pooler")
        if self.cross_attention_mlp and not self.cross_attention_layers:
            raise UserError("cross_attention_mlp needs cross_attention_layers", key_path="cross_attention_mlp")
        if self.cross_attention_layers > self.layers:
            raise UserError(f"cross_attention_layers ({self.cross_attention_layers}) exceeds layers "
                            f"({self.layers})", key_path="cross_attention_layers")
        return self

    @property
    def patches(self) -> int:
        """(image_size / patch_size)^2 (0 for a non-vision submodule)."""
        if self.role != "vision":
            return 0
        return (self.image_size // self.patch_size) ** 2

    @property
    def own_tokens(self) -> int:
        """Tokens per sample this submodule's own input gives: patches (+ class token) or text tokens."""
        if self.role == "vision":
            return self.patches + int(self.class_token)
        return self.tokens

    @property
    def input_rows(self) -> int:
        """Rows of the real input table: 3 p^2 for a patch embedding (a linear layer over RGB patches), none for a
        submodule fed by another's token states (``input_from``), else the vocabulary."""
        if self.role == "vision":
            return 3 * self.patch_size ** 2
        return 0 if self.input_from is not None else self.vocab

    def engine_model(self, seq_len: int) -> ModelSpec:
        """The stack as the engine's :class:`ModelSpec` (module docstring): the output projection of
        ``embed_dim`` rows stands for the embedding and head."""
        return ModelSpec(name=self.name, layers=self.layers, hidden=self.hidden, heads=self.heads,
                         kv_heads=self.kv_heads, ffn_hidden=self.ffn_hidden, vocab=self.embed_dim,
                         activation=self.activation, norm=self.norm, tied_embeddings=False,
                         linear_bias=self.norm == "layernorm", position_embedding="learned",
                         max_position=max(seq_len, 1))

    @property
    def table_params(self) -> float:
        """Parameters of the real input table minus the engine's ``embed_dim`` x h stand-in (negative when the
        submodule has no table of its own: ``input_from``)."""
        return float((self.input_rows - self.embed_dim) * self.hidden)


class MultimodalSpec(BaseModel):
    """A multimodal model: its submodules, the loss that ties them and (LLaVA) the projector."""

    model_config = _STRICT

    name: str = Field("custom", description="preset name or a label")
    loss: Loss = Field(description="contrastive (CLIP, LiT), contrastive+captioning (CoCa), lm (LLaVA)")
    submodules: tuple[SubmoduleSpec, ...] = Field(min_length=1, description="the submodules, in data-flow order")
    projector: ProjectorSpec | None = Field(None, description="vision-to-LLM projector (LLaVA)")
    embed_dim: int | None = Field(None, ge=1, description="width of the contrastive embedding (contrastive losses)")

    @model_validator(mode="after")
    def _check(self) -> MultimodalSpec:
        names = [s.name for s in self.submodules]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise UserError(f"submodule names must be unique; repeated: {', '.join(dup)}", key_path="submodules")
        for s in self.submodules:
            src = next((x for x in self.submodules if x.name == s.input_from), None)
            if s.input_from is not None and (src is None or src is s or src.role == "vision"):
                raise UserError(f"submodule {s.name!r}: input_from ({s.input_from!r}) must name another text or "
                                f"decoder submodule (submodules: {', '.join(names)})",
                                key_path=f"submodules.{s.name}.input_from")
            if src is not None and s.tokens > src.tokens:
                raise UserError(f"submodule {s.name!r}: tokens ({s.tokens}) exceed the tokens of its input_from "
                                f"{src.name!r} ({src.tokens}): it continues that submodule's token stream",
                                key_path=f"submodules.{s.name}.tokens")
        if "contrastive" in self.loss:
            roles = sorted(s.role for s in self.submodules)
            text = [s for s in self.submodules if s.role == "text"]
            if roles.count("vision") != 1 or (len(text) > 1 or (not text and roles.count("decoder") != 1)
                                              or set(roles) - {"vision", "text", "decoder"}):
                raise UserError(f"a contrastive loss needs one vision and one text (or decoder) submodule, plus "
                                f"decoders (CoCa), got {', '.join(roles)}", key_path="loss")
            if self.embed_dim is None:
                raise UserError("a contrastive loss needs embed_dim (the embedding width)", key_path="embed_dim")
        if self.loss == "lm" and [s.role for s in self.submodules].count("llm") != 1:
            raise UserError("an lm loss needs exactly one llm submodule", key_path="loss")
        return self

    def extra_params(self, sub: SubmoduleSpec) -> float:
        """Parameters of ``sub`` its engine model lacks: the real input table (:attr:`SubmoduleSpec.table_params`),
        the cross-attention blocks (:meth:`cross_block_params` each) and the attentional pooler
        (:meth:`pooler_params`, on the last stage; the rest on the first)."""
        cross = sub.cross_attention_layers * self.cross_block_params(sub) if self.vision is not None else 0.0
        return sub.table_params + cross + self.pooler_params(sub)

    def pooler_params(self, sub: SubmoduleSpec) -> float:
        """The attentional pooler's parameters (:meth:`PoolerSpec.params`; 0 without one)."""
        if sub.attentional_pooler is None:
            return 0.0
        return sub.attentional_pooler.params(sub.hidden)

    def cross_block_params(self, sub: SubmoduleSpec) -> float:
        """One cross-attention block of ``sub`` over the image tokens of width h_kv (:attr:`image_kv`), as OpenCLIP's
        ``ResidualAttentionBlock(is_cross_attention=True)`` is built: Q and O (h x h), K and V from h_kv (h_kv x h),
        the projections' biases (4 h, with the stack's linear biases), a norm on the queries and one on the image
        tokens (2 h + 2 h_kv; RMSNorm: h + h_kv); with ``cross_attention_mlp`` an MLP of the stack's shape (2 h f,
        SwiGLU 3 h f, biases f + h) and its norm. OpenCLIP coca_ViT-L-14 (h = h_kv = 768, f = 3072): 7,089,408."""
        h, hkv = sub.hidden, self.image_kv[1]
        bias = sub.norm == "layernorm"
        per_norm = 2 if sub.norm == "layernorm" else 1
        out = 2 * h * h + 2 * hkv * h + (4 * h if bias else 0) + per_norm * (h + hkv)
        if sub.cross_attention_mlp:
            f = sub.ffn_hidden or 4 * h
            out += (3 if sub.activation == "swiglu" else 2) * h * f + ((f + h) if bias else 0) + per_norm * h
        return float(out)

    @property
    def image_kv(self) -> tuple[int, int]:
        """(tokens, width) per sample of what a decoder's cross-attention reads: the attentional pooler's output
        tokens (:attr:`PoolerSpec.tokens_out` of width ``width``), else the encoder's own tokens at its width."""
        v = self.vision
        if v is None:
            return 0, 0
        if v.attentional_pooler is not None:
            return v.attentional_pooler.tokens_out, v.attentional_pooler.width
        return v.own_tokens, v.hidden

    def submodule(self, name: str) -> SubmoduleSpec:
        for s in self.submodules:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def vision(self) -> SubmoduleSpec | None:
        return next((s for s in self.submodules if s.role == "vision"), None)

    def seq_len(self, sub: SubmoduleSpec) -> int:
        """Tokens per sample the submodule's stack processes: its own, plus the image tokens an LLM reads (the
        class token dropped, as LLaVA takes the patch tokens)."""
        if sub.role == "llm" and self.vision is not None:
            return sub.own_tokens + self.vision.patches
        return sub.own_tokens

    @property
    def contrastive_text(self) -> SubmoduleSpec | None:
        """The submodule whose embedding meets the image embedding in the contrastive loss: the text submodule (CoCa:
        the unimodal decoder), else the one decoder (None without a contrastive loss)."""
        if "contrastive" not in self.loss:
            return None
        return next((s for s in self.submodules if s.role == "text"),
                    next((s for s in self.submodules if s.role == "decoder"), None))

    def token_edges(self) -> list[TokenEdge]:
        """What flows between submodules per sample, producer to consumer (its gradient flows back): the image
        tokens (N x h_v elements) into an LLM or a decoder's cross-attention (:attr:`image_kv`: the attentional
        pooler's tokens where there is one), a submodule's token states
        (T x h) into the submodule whose ``input_from`` it is, and the image embedding (e) to the contrastive text
        submodule, where the loss is computed (added to the image tokens when both go to one consumer)."""
        edges: dict[tuple[str, str], TokenEdge] = {}
        vision = self.vision
        for s in self.submodules:
            if vision is not None and s.cross_attention_layers:
                tokens, width = self.image_kv
                edges[vision.name, s.name] = TokenEdge(vision.name, s.name, tokens * width, "image_tokens",
                                                       cross_attention=True)
            elif vision is not None and s.role == "llm":
                edges[vision.name, s.name] = TokenEdge(vision.name, s.name, vision.own_tokens * vision.hidden,
                                                       "image_tokens")
            if s.input_from is not None:
                src = self.submodule(s.input_from)
                edges[src.name, s.name] = TokenEdge(src.name, s.name, s.tokens * src.hidden, "text_tokens")
        text = self.contrastive_text
        if text is not None and vision is not None:
            old = edges.get((vision.name, text.name))
            edges[vision.name, text.name] = TokenEdge(
                vision.name, text.name, self.embed_dim + (old.elements if old else 0),
                old.kind + "+embedding" if old else "embedding", cross_attention=bool(old and old.cross_attention))
        return list(edges.values())

    def feeds(self, sub: SubmoduleSpec) -> bool:
        """Whether ``sub``'s output tokens feed another submodule's layers (CoCa's cross-attention and its
        multimodal decoder's input, LLaVA's LLM) rather than only the loss."""
        return any(e.producer == sub.name and e.kind != "embedding" for e in self.token_edges())


@dataclass(frozen=True)
class TokenEdge:
    """Elements per sample sent from ``producer``'s last stage to ``consumer`` (and their gradient back)."""

    producer: str
    consumer: str
    elements: int
    kind: str
    """``image_tokens``, ``text_tokens``, ``embedding`` or ``image_tokens+embedding``."""
    cross_attention: bool = False
    """The consumer reads them in every cross-attention layer (every pipeline stage needs them), not at its input."""

    @property
    def into_layers(self) -> bool:
        """The tokens enter the consumer's layers (its first stage, or every stage for cross-attention) rather than
        only the loss on its last stage."""
        return self.kind != "embedding"


def preset_names() -> list[str]:
    folder = resources.files("simulator.multimodal") / "presets"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


@memo(maxsize=64, loaded=True)
def load_multimodal_preset(name: str) -> MultimodalSpec:
    """The shipped preset ``name`` (``simulator/multimodal/presets/<name>.yaml``, each with its source)."""
    names = preset_names()
    if name not in names:
        raise UserError(f"unknown multimodal preset {name!r}; accepted: {', '.join(names)}",
                        key_path="multimodal.model.preset")
    path = resources.files("simulator.multimodal") / "presets" / f"{name}.yaml"
    data = fast_safe_load(path.read_text(encoding="utf-8"))
    return build_spec(data, key_prefix="multimodal.model", file=str(path))


def build_spec(data: dict, *, key_prefix: str, file: str | None = None) -> MultimodalSpec:
    """A :class:`MultimodalSpec` from a mapping whose ``submodules`` is a name -> fields mapping."""
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping, got {type(data).__name__}", file=file, key_path=key_prefix)
    subs = data.get("submodules")
    if not isinstance(subs, dict) or not subs:
        raise UserError("submodules must be a mapping of name -> fields", file=file,
                        key_path=f"{key_prefix}.submodules")
    built = []
    for name, fields in subs.items():
        if not isinstance(fields, dict):
            raise UserError(f"expected a mapping, got {type(fields).__name__}", file=file,
                            key_path=f"{key_prefix}.submodules.{name}")
        where = f"{key_prefix}.submodules.{name}"
        try:
            built.append(build(SubmoduleSpec, {"name": str(name), **fields}, key_prefix=where, file=file))
        except UserError as exc:   # a cross-field rule of SubmoduleSpec names its key relative to the submodule
            if exc.key_path and exc.key_path.startswith(where):
                raise
            raise exc.located(key_prefix=where) from None
    projector = data.get("projector")
    rest = {k: v for k, v in data.items() if k not in ("submodules", "projector")}
    try:
        return MultimodalSpec(**rest, submodules=tuple(built),
                              projector=build(ProjectorSpec, projector, key_prefix=f"{key_prefix}.projector",
                                              file=file) if projector is not None else None)
    except UserError as exc:
        raise exc.located(file=file, key_prefix=key_prefix) from None
    except Exception as exc:  # pydantic ValidationError on name / loss
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            from simulator.yamlio import validation_error_to_user_error

            raise validation_error_to_user_error(exc, file=file, key_prefix=key_prefix) from None
        raise
