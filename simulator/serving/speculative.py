"""Speculative decoding priced through the serving step model (docs/speculative.md).

One decode iteration of ``seqs`` sequences with ``past`` cached tokens each (``serving.speculative``,
:class:`~simulator.implementation.speculative.SpeculativeConfig`, k = ``num_speculative_tokens``):

- **draft**: k sequential draft passes, each a decode step of ``Batch(seqs, 1, past + i)`` (i = 0 .. k-1) through
  :func:`simulator.serving.step.step_time` on the drafter's plan:
  - ``mtp``: the target's plan holding only its last layer (an MTP module's transformer layer is of the last layer's
    kind: :meth:`ModelSpec.is_moe_layer`), the shared embedding and LM head, plus the module's ``eh_proj`` GEMM
    (2h -> h, replicated: vLLM ``deepseek_mtp.py`` ``nn.Linear(2h, h)``);
  - ``eagle`` / ``eagle3``: the target's plan holding one dense layer of the target's width (EAGLE's draft head is one
    decoder layer of the target's configuration: Li et al. 2024, EAGLE, Sec. 4; vLLM ``llama_eagle.py`` builds it
    from the target's config with one layer), plus its ``fc`` GEMM (2h -> h; EAGLE-3 3h -> h, replicated); EAGLE-3
    has an LM head of its own over ``draft_vocab`` tokens;
  - ``draft_model``: the draft model resolved on the target's TP degree (vLLM's draft runs on the target's TP
    group), every layer.
- **verify**: one step of the target over ``Batch(seqs, k + 1, past)`` (phase ``verify``: the decode kernels over
  k + 1 query rows per sequence, K/V read included, logits of all k + 1 positions).
- Expected tokens per iteration ``E`` (:meth:`SpeculativeConfig.expected_tokens`): a step of the serving model is
  ``(draft + verify) / E`` per token, which is what TPOT, the concurrency curve and the request-rate loop see.

Memory: the drafter's weights (per GPU, the serving precision's bytes) and its K/V cache (the draft's layers' bytes
per token beside the target's) join each stage's report (:func:`with_draft`), so the cache holds fewer sequences.

Not modelled: tree drafts (EAGLE-2's dynamic tree verifies more than k + 1 tokens), the rejection sampler's kernel,
the host's extra work per iteration, the k extra K/V slots a sequence reserves, pipeline parallelism (refused).
"""

from __future__ import annotations

import dataclasses
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


@dataclass(frozen=True)
class Iteration:
    """One speculative iteration: k draft passes, one verify step, and the tokens it yields per sequence."""

    draft_s: float
    verify: StepTime
    expected_tokens: float
    k: int

    @property
    def iteration_s(self) -> float:
        return self.draft_s + self.verify.step_s

    def per_token(self) -> StepTime:
        """The iteration as a step of one token per sequence: every time and the breakdown over ``E``; the draft's
        seconds under ``draft``."""
        e = self.expected_tokens
        breakdown = {key: value / e for key, value in self.verify.breakdown_s.items()}
        breakdown["draft"] = self.draft_s / e
        return StepTime(step_s=self.iteration_s / e, breakdown_s=breakdown, kernels=self.verify.kernels,
                        gpu_s=(self.verify.gpu_s + self.draft_s) / e, comm=self.verify.comm)

    def to_dict(self) -> dict:
        return {"num_speculative_tokens": self.k, "expected_tokens": self.expected_tokens,
                "draft_s": self.draft_s, "verify_s": self.verify.step_s, "iteration_s": self.iteration_s,
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
        return Drafter(_with_layers(rp, model, model.layers - 1), FC_INPUTS["mtp"], model.mtp_layers)
    if spec.method in ("eagle", "eagle3"):
        head = model
        if spec.method == "eagle3":
            head = type(model).model_validate({**model.model_dump(), "vocab": spec.draft_vocab or EAGLE3_DRAFT_VOCAB,
                                               "tied_embeddings": False})
        return Drafter(_with_layers(rp, head, _dense_layer(model)), FC_INPUTS[spec.method], 1)
    return Drafter(_draft_model_plan(rp, ctx.draft_model), 0, ctx.draft_model.layers)


def _draft_model_plan(rp: ResolvedPlan, draft: ModelSpec) -> ResolvedPlan:
    tp = rp.parallel.tp
    training = {**rp.training.model_dump(exclude_defaults=True), "global_batch": rp.training.micro_batch}
    try:
        return resolve_plan(draft, {"tp": tp}, training, tp)
    except UserError as err:
        raise UserError(f"the draft model on the target's tp {tp}: {err.message}",
                        key_path=f"{_KEY}.draft_model") from None


def _fc_s(ctx: StepContext, d: Drafter, seqs: int) -> float:
    """The draft head's input projection ``fc_inputs x h -> h`` over ``seqs`` rows (replicated on every TP rank)."""
    if not d.fc_inputs:
        return 0.0
    h = d.plan.model.hidden
    gemm = Gemm("draft.fc", "fwd", seqs, d.fc_inputs * h, h, dtype=d.plan.gemm_dtype(ctx.gpu))
    return sum(price_serving(LayerProgram(kind="head", gemms=(gemm,), fwd_flops=gemm.flops), ctx.gpu,
                             ctx.eff).values())


def iteration(ctx: StepContext, rp: ResolvedPlan, seqs: int, past: int) -> Iteration:
    """One speculative iteration of ``seqs`` sequences with ``past`` cached tokens each (module docstring)."""
    spec: SpeculativeConfig = ctx.serving.speculative
    k, graphs = spec.num_speculative_tokens, ctx.serving.cuda_graphs
    d = drafter(ctx, rp)
    dctx = dataclasses.replace(ctx, model=d.plan.model)
    draft = sum(step_time(dctx, d.plan, Batch(seqs, 1, past + i), phase="decode", graphs=graphs).step_s
                for i in range(k)) + k * _fc_s(ctx, d, seqs)
    verify = step_time(ctx, rp, Batch(seqs, k + 1, past), phase="verify", graphs=graphs)
    return Iteration(draft_s=draft, verify=verify, expected_tokens=spec.expected_tokens(), k=k)


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
            if spec.method == "eagle3":
                tensors += [t for t in head_params(d.plan.model) if t.name == "output_layer"]
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
