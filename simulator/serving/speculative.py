"""Speculative decoding priced through the serving step model (docs/speculative.md).

One decode iteration of ``seqs`` sequences with ``past`` cached tokens each (``serving.speculative``,
:class:`~simulator.implementation.speculative.SpeculativeConfig`, k = ``num_speculative_tokens``):

- **draft** (:func:`draft_s`, SGLang's EAGLE worker as the engines run it): one pass of the drafter over each
  sequence's accepted tokens (``ceil(E)`` rows per sequence), then k - 1 passes over ``topk`` rows per sequence
  (``serving.speculative.topk``: the branches of a draft tree; 1: a chain), each through
  :func:`simulator.serving.step.step_time` on the drafter's plan:
  - ``mtp``: the target's plan holding only its last layer (an MTP module's transformer layer is of the last layer's
    kind: :meth:`ModelSpec.is_moe_layer`), the shared embedding and LM head, plus the module's ``eh_proj`` GEMM
    (2h -> h, replicated: vLLM ``deepseek_mtp.py`` ``nn.Linear(2h, h)``) on every pass;
  - ``eagle`` / ``eagle3``: the target's plan holding one dense layer of the target's width (EAGLE's draft head is one
    decoder layer of the target's configuration: Li et al. 2024, EAGLE, Sec. 4; vLLM ``llama_eagle.py`` builds it
    from the target's config with one layer), plus its ``fc`` GEMM (2h -> h on every pass; EAGLE-3 3h -> h on the
    first pass only, and its q/k/v reading 2h inputs: :func:`_head_s`); EAGLE-3 has an LM head of its own over
    ``draft_vocab`` tokens;
  - ``draft_model``: the draft model resolved on the target's TP degree (vLLM's draft runs on the target's TP
    group), every layer.
- **verify**: one step of the target over ``Batch(seqs, n, past)``, n = ``num_draft_tokens`` tree nodes per
  sequence (k + 1 for a chain; phase ``verify``: the decode kernels over n query rows per sequence with the tree
  mask, K/V read included, logits of all n positions).
- **host**: the engine core's host time per iteration where the engine does not overlap it under speculation
  (``serving.host``, ``speculative_overlap``: SGLang disables its overlap scheduler for EAGLE/NEXTN).
- Expected tokens per iteration ``E`` (:meth:`SpeculativeConfig.expected_tokens`): a step of the serving model is
  ``(draft + verify + host) / E`` per token, which is what TPOT, the concurrency curve and the request-rate loop see.

Memory: the drafter's weights (per GPU, the serving precision's bytes) and its K/V cache (the draft's layers' bytes
per token beside the target's) join each stage's report (:func:`with_draft`), so the cache holds fewer sequences.

Not modelled: the tree's small kernels (top-k over each pass's logits, tree construction, the greedy tree
acceptance), the host work the speculative worker adds beyond the engine's step time, the K/V slots a sequence
reserves for its draft, pipeline parallelism (refused).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from simulator.errors import UserError
from simulator.implementation.speculative import EAGLE3_DRAFT_VOCAB, SpeculativeConfig
from simulator.memory import MemoryReport
from simulator.memory.inference import kv_cache_bytes_per_token_layer
from simulator.memory.items import MemoryItem
from simulator.model import ModelSpec
from simulator.model.params import ParamTensor, head_params, layer_params, local_numel, mtp_head_params
from simulator.plan import Batch, ResolvedPlan, resolve_plan
from simulator.plan.params import stage_params
from simulator.pricing.serving import price_serving
from simulator.program import LayerProgram
from simulator.program.ops import Gemm
from simulator.serving.step import StepContext, StepTime, step_time

_KEY = "serving.speculative"
#: hidden states the draft head's input projection concatenates: the token embedding and the target's last hidden
#: state (EAGLE-1/2, DeepSeek MTP's eh_proj), or three of the target's hidden states (EAGLE-3: low, middle, high)
FC_INPUTS = {"mtp": 2, "eagle": 2, "eagle3": 3}


@dataclass(frozen=True)
class Drafter:
    """What drafts: its plan (one replica), its model, and the input projection's width in hidden sizes (0: none)."""

    plan: ResolvedPlan
    fc_inputs: int
    layers: int
    method: str = "draft_model"


@dataclass(frozen=True)
class Iteration:
    """One speculative iteration: the draft passes, one verify step, the engine-core host time the iteration waits
    for, and the tokens it yields per sequence."""

    draft_s: float
    verify: StepTime
    expected_tokens: float
    k: int
    host_s: float = 0.0
    verified_tokens: int = 0
    topk: int = 1

    @property
    def iteration_s(self) -> float:
        return self.draft_s + self.verify.step_s + self.host_s

    def per_token(self) -> StepTime:
        """The iteration as a step of one token per sequence: every time and the breakdown over ``E``; the draft's
        seconds under ``draft``, the host's under ``host``."""
        e = self.expected_tokens
        breakdown = {key: value / e for key, value in self.verify.breakdown_s.items()}
        breakdown["draft"] = self.draft_s / e
        breakdown["host"] = breakdown.get("host", 0.0) + self.host_s / e
        return StepTime(step_s=self.iteration_s / e, breakdown_s=breakdown, kernels=self.verify.kernels,
                        gpu_s=(self.verify.gpu_s + self.draft_s) / e, comm=self.verify.comm)

    def to_dict(self) -> dict:
        return {"num_speculative_tokens": self.k, "topk": self.topk, "verified_tokens": self.verified_tokens,
                "expected_tokens": self.expected_tokens, "draft_s": self.draft_s, "verify_s": self.verify.step_s,
                "host_s": self.host_s, "iteration_s": self.iteration_s,
                "per_token_s": self.iteration_s / self.expected_tokens}


def _with_layers(rp: ResolvedPlan, model: ModelSpec, layer: int) -> ResolvedPlan:
    """``rp`` holding only layer ``layer`` of ``model`` on one stage (a draft head's layer on the target's TP/EP)."""
    fields = {name: getattr(rp, name) for name in type(rp).model_fields}
    parallel = rp.parallel.model_copy(update={"pp": 1})
    return type(rp)(**{**fields, "model": model, "parallel": parallel, "stage_layers": ((layer,),),
                       "stage_chunks": ((1,),)})


def _dense_layer(model: ModelSpec) -> int:
    layer = next((i for i in range(model.layers) if not model.is_moe_layer(i)), None)
    if layer is None:
        raise UserError(f"an EAGLE head is one dense decoder layer of the target's width; model {model.name} has no "
                        "dense layer to take it from (use method draft_model or mtp)", key_path=f"{_KEY}.method")
    return layer


def drafter(ctx: StepContext, rp: ResolvedPlan) -> Drafter:
    """The drafter of ``serving.speculative`` on the target's plan ``rp`` (module docstring)."""
    spec, model = ctx.serving.speculative, ctx.model
    if rp.parallel.pp > 1:
        raise UserError(f"speculative decoding with pipeline parallelism (pp {rp.parallel.pp}) is not modelled",
                        key_path=_KEY)
    if spec.method == "mtp":
        if model.mtp_layers == 0:
            raise UserError(f"method mtp drafts with the model's MTP modules; model {model.name} has none "
                            "(model.mtp_layers 0)", key_path=f"{_KEY}.method")
        return Drafter(_with_layers(rp, model, model.layers - 1), FC_INPUTS["mtp"], model.mtp_layers, "mtp")
    if spec.method in ("eagle", "eagle3"):
        head = model
        if spec.method == "eagle3":
            head = type(model).model_validate({**model.model_dump(), "vocab": spec.draft_vocab or EAGLE3_DRAFT_VOCAB,
                                               "tied_embeddings": False})
        return Drafter(_with_layers(rp, head, _dense_layer(model)), FC_INPUTS[spec.method], 1, spec.method)
    return Drafter(_draft_model_plan(rp, ctx.draft_model), 0, ctx.draft_model.layers)


def _draft_model_plan(rp: ResolvedPlan, draft: ModelSpec) -> ResolvedPlan:
    tp = rp.parallel.tp
    training = {**rp.training.model_dump(exclude_defaults=True), "global_batch": rp.training.micro_batch}
    try:
        return resolve_plan(draft, {"tp": tp}, training, tp)
    except UserError as err:
        raise UserError(f"the draft model on the target's tp {tp}: {err.message}",
                        key_path=f"{_KEY}.draft_model") from None


def _gemm_s(ctx: StepContext, d: Drafter, name: str, rows: int, k: float, n: float) -> float:
    gemm = Gemm(name, "fwd", rows, k, n, dtype=d.plan.gemm_dtype(ctx.gpu))
    return sum(price_serving(LayerProgram(kind="head", gemms=(gemm,), fwd_flops=gemm.flops), ctx.gpu,
                             ctx.eff).values())


def _head_s(ctx: StepContext, d: Drafter, rows: int, first: bool) -> float:
    """What a draft head computes beyond the target's layer, over ``rows`` token rows of one pass: its input
    projection ``fc_inputs x h -> h`` (replicated) on every pass for EAGLE-1/2 and MTP (``fc`` / ``eh_proj`` of the
    concatenated embedding and hidden state), on the first pass only for EAGLE-3 (its ``fc`` fuses the target's three
    hidden states; later passes feed the head's own h-wide state: sglang ``llama_eagle3.py`` applies ``fc`` only when
    the hidden state is wider than the embedding); EAGLE-3's q/k/v projection also reads 2h inputs (the normed
    embedding and hidden state concatenated: ``QKVParallelLinear(2 * hidden_size, ...)``), the second h priced here."""
    if not d.fc_inputs:
        return 0.0
    model, method = d.plan.model, d.method
    h = model.hidden
    seconds = _gemm_s(ctx, d, "draft.fc", rows, d.fc_inputs * h, h) if first or method != "eagle3" else 0.0
    if method == "eagle3":
        shape = d.plan.shape_of(Batch(1, 1))
        qkv = (shape.heads_tp + 2 * shape.kv_heads_tp) * model.dhead
        seconds += _gemm_s(ctx, d, "draft.qkv_hidden", rows, h, qkv)
    return seconds


def _host_s(ctx: StepContext, seqs: int, gpu_s: float) -> float:
    """The engine core's host time an iteration of ``gpu_s`` GPU seconds adds (``serving.host`` as the engine runs
    it under speculation, :meth:`EngineHost.speculating`): ``step_s + seq_s x seqs`` after the GPU work where the
    engine gives its overlap up (SGLang), what exceeds the GPU time where it keeps it; 0 without host prices."""
    host = ctx.serving.host
    return 0.0 if host is None else host.speculating().engine_s(gpu_s, seqs, 0) - gpu_s


def draft_s(ctx: StepContext, d: Drafter, seqs: int, past: int) -> float:
    """The draft passes of one iteration (SGLang's EAGLE worker, eagle_worker.py; vLLM V1's EAGLE proposer runs the
    same two kinds of pass): first the draft over each sequence's accepted tokens, ``ceil(E)`` per sequence
    (``forward_draft_extend_after_decode``: ``extend_lens = accept_length + 1``), which yields the first draft
    token(s), captured in a CUDA graph or issued eagerly (``draft_extend_graph``); then ``k - 1`` passes over
    ``topk`` rows per sequence (``draft_forward``: every branch kept at the last level is one row), pass i at
    ``past + i`` cached tokens. A chain (topk 1) runs the same k passes."""
    spec: SpeculativeConfig = ctx.serving.speculative
    graphs, dctx = ctx.serving.cuda_graphs, dataclasses.replace(ctx, model=d.plan.model)
    extend = max(1, math.ceil(spec.expected_tokens() - 1e-9))
    total = step_time(dctx, d.plan, Batch(seqs, extend, past), phase="decode",
                      graphs=graphs and spec.draft_extend_graph).step_s + _head_s(ctx, d, seqs * extend, True)
    rows = seqs * spec.topk
    for i in range(1, spec.num_speculative_tokens):
        total += step_time(dctx, d.plan, Batch(rows, 1, past + i), phase="decode", graphs=graphs).step_s
        total += _head_s(ctx, d, rows, False)
    return total


def iteration(ctx: StepContext, rp: ResolvedPlan, seqs: int, past: int) -> Iteration:
    """One speculative iteration of ``seqs`` sequences with ``past`` cached tokens each (module docstring): the draft
    passes (:func:`draft_s`), the verify of ``num_draft_tokens`` tree nodes per sequence (k + 1 for a chain) in one
    forward with the tree mask over the cache, logits of every node, then the host time the engine adds
    (:func:`_host_s`)."""
    spec: SpeculativeConfig = ctx.serving.speculative
    d = drafter(ctx, rp)
    draft = draft_s(ctx, d, seqs, past)
    n = spec.verified_tokens()
    verify = step_time(ctx, rp, Batch(seqs, n, past), phase="verify", graphs=ctx.serving.cuda_graphs)
    return Iteration(draft_s=draft, verify=verify, expected_tokens=spec.expected_tokens(),
                     k=spec.num_speculative_tokens, host_s=_host_s(ctx, seqs, draft + verify.step_s),
                     verified_tokens=n, topk=spec.topk)


def draft_bytes(ctx: StepContext, rp: ResolvedPlan) -> tuple[float, float, str]:
    """The drafter's weights per GPU (bytes), its K/V cache per token per GPU (bytes) and a formula."""
    d = drafter(ctx, rp)
    spec, model, p = ctx.serving.speculative, ctx.model, rp.parallel
    element = rp.recipe.serve_param
    if spec.method == "draft_model":
        sp = stage_params(d.plan, 0)
        params = sp.dense + sp.expert
    else:
        tensors: list[ParamTensor] = []
        if spec.method == "mtp":
            tensors += mtp_head_params(model)
            for i in range(model.mtp_layers):
                tensors += layer_params(model, model.layers + i)
        else:
            tensors += layer_params(model, _dense_layer(model))
            tensors.append(ParamTensor("draft.fc", d.fc_inputs * model.hidden ** 2, "replicated", "draft"))
            if spec.method == "eagle3":  # its own LM head; q/k/v read the embedding and hidden state (2h)
                tensors += [t for t in head_params(d.plan.model) if t.name == "output_layer"]
                h, dh = model.hidden, model.dhead
                tensors += [ParamTensor("draft.q_hidden", h * model.heads * dh, "tp", "draft"),
                            ParamTensor("draft.kv_hidden", h * 2 * model.kv * dh, "kv", "draft")]
        params = sum(local_numel(t, tp=p.tp, kv_ranks=rp.shape.kv_ranks, ep=p.ep, etp=p.etp) for t in tensors)
    kv = d.layers * kv_cache_bytes_per_token_layer(d.plan)
    return params * element, kv, f"{spec.method}: {params:.4g} params x {element} B; {d.layers} layers of K/V"


def with_draft(ctx: StepContext, rp: ResolvedPlan, memory: MemoryReport) -> MemoryReport:
    """``memory`` with the drafter's weights and K/V cache added to every stage (none without speculation). The
    draft's cache holds the same tokens as the target's: its bytes are the target cache's x the ratio of bytes per
    token (the cache item keeps the name ``kv_cache``, so the capacity counts it per sequence)."""
    if ctx.serving is None or ctx.serving.speculative is None:
        return memory
    weights, kv_token, formula = draft_bytes(ctx, rp)
    stages = []
    for st in memory.stages:
        target_token = len(rp.stage_layers[st.stage]) * kv_cache_bytes_per_token_layer(rp)
        kv = sum(i.bytes for i in st.items if i.name == "kv_cache") * kv_token / target_token
        extra = (MemoryItem("weights", "weights.draft", weights, formula),
                 MemoryItem("other", "kv_cache", kv, f"draft K/V: {kv_token:g} B per token"))
        stages.append(dataclasses.replace(st, items=st.items + extra))
    return dataclasses.replace(memory, stages=tuple(stages))


def speculative_decode_time(ctx: StepContext, rp: ResolvedPlan, seqs: int, past: int) -> StepTime:
    """A decode step as the serving model sees it under speculation: the iteration over ``E`` tokens."""
    return iteration(ctx, rp, seqs, past).per_token()
