"""Time of one serving step (a prefill chunk or a decode step) op by op on one replica (docs/serving/step_model.md).

A step processes a :class:`~simulator.plan.Batch` under the scenario's plan: ``seqs`` sequences, each adding ``new``
tokens on top of ``past`` cached ones (prefill: past 0, new = the prompt or a chunk of it; decode: new 1, past =
context - 1); the rank's share of each layer is the plan's shape of that batch (``ResolvedPlan.shape_of``). Per layer
on one rank:

- GEMMs (q/k/v fused, o, MLP or router + routed and shared experts, LM head on the last token of each sequence) at
  :func:`simulator.compute.gemm.gemm_times`: ``launch + max(FLOPs / (peak x efficiency), bytes / (HBM x
  memory_efficiency))``; at decode sizes the weight bytes bound them.
- Attention: decode streams the K/V cache (``seqs x context x cache bytes per token and layer``) at the attention
  kernel's rate (:mod:`simulator.serving.backends`); prefill runs causal FLOPs ``4 x seqs x new x (past + new/2) x
  d x heads`` at the forward FlashAttention rate.
- Memory-bound kernels (norms, residual adds, RoPE, activation, K/V cache write) at HBM bandwidth, and
  ``launch_s`` for each small kernel of the kernel set.
- MoE: routed experts touch ``E_local (1 - (1 - k/E)^(tokens in the EP group))`` local experts in expectation, each
  GEMM'd at the expert kernel's efficiency, times the routing's load imbalance (max over EP ranks / mean: 1 with
  expected counts; with ``moe.seed`` a decode step samples one batch's routing, prefill keeps expected counts);
  dispatch and combine by the phase's all-to-all backend.
- TP: two all-reduces of ``tokens x h`` per layer (latency regime at decode: the collectives model's LL/NVLS/tree
  choice, or a measured custom kernel); the LM head's logits gathered over TP. PP: one send/recv of ``tokens x h /
  tp`` per stage boundary; prefill runs the stages one after another, decode keeps up to ``pp`` micro-batches in
  flight (``step_time(microbatches=...)``).
- Without CUDA graphs (``cuda_graphs: false``, always for prefill, a decode batch outside
  ``cuda_graph_batch_sizes``, and any step whose all-to-all backend cannot be captured: DeepEP's normal kernels)
  the host issues every kernel: the step takes at least ``kernels x host_launch_s``. HF generate decides itself (``serving.cuda_graphs`` follows
  the kernel set: eager never captures, the compiled static-cache forward always does), and its compiled decode adds the host work around the graph replay that the
  GPU waits for (``KernelSet.step_host_s``).
- The K/V cache's implementation (``serving.kv_cache_impl``: paged, HF's concatenating DynamicCache or its static
  cache with K/V expanded to every query head) is priced in the layer program (memory ops and attention bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from simulator.collectives.custom_allreduce import choose
from simulator.compute.efficiency import ComputeEfficiency
from simulator.hardware import GpuSpec
from simulator.hardware.calibration import Calibration
from simulator.implementation.serving import ServingConfig
from simulator.memory.inference import kv_cache_bytes_per_token_layer
from simulator.memory.kv_window import KvWindow, kv_window_of
from simulator.model import ModelSpec
from simulator.moe import MoeSettings, sm_slowdown
from simulator.plan import Batch, ResolvedPlan, serving_backend
from simulator.pricing.groups import GroupTimer, OpTiming
from simulator.pricing.serving import price_serving
from simulator.program import (
    LayerProgram,
    serving_embedding_program,
    serving_head_program,
    serving_layer_program,
)
from simulator.program.serving import cache_attention
from simulator.serving import backends as B
from simulator.serving.tbo import split_batch, tbo_layer_s
from simulator.topology import Topology
from simulator.traffic import serving_boundary_traffic, serving_layer_traffic, serving_step_traffic
from simulator.traffic.ops import CommOp

#: op classes of the step breakdown (seconds per step on the critical path)
OP_CLASSES = ("gemm", "attention", "memory_ops", "launch", "experts", "tp_comm", "ep_comm", "pp_comm", "host")


@dataclass(frozen=True)
class StepTime:
    """One step's seconds (``step_s``), its breakdown by op class, kernels launched and the comm ops priced."""

    step_s: float
    breakdown_s: dict[str, float]
    kernels: int
    gpu_s: float
    comm: tuple[dict, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"step_s": self.step_s, "gpu_s": self.gpu_s, "kernels": self.kernels,
                "breakdown_s": dict(self.breakdown_s), "comm": list(self.comm)}


@dataclass(frozen=True)
class StepContext:
    """What every step of one scenario shares: hardware, coefficients, the serving choices."""

    model: ModelSpec
    gpu: GpuSpec
    eff: ComputeEfficiency
    serving: ServingConfig
    moe_settings: MoeSettings
    topology: Topology
    calibration: Calibration | None = None
    draft_model: ModelSpec | None = None
    """``serving.speculative`` method draft_model: the draft model (the scenario layer resolves it)"""



def kv_window(ctx: StepContext) -> KvWindow | None:
    """The engine's rule for sliding-window layers' K/V pages (``serving.sliding_window_cache``,
    simulator/memory/kv_window.py); None: every layer holds every token (no window, a full rule, or an HF cache)."""
    s = ctx.serving
    if s is None or s.kv_cache_impl != "paged":
        return None
    return kv_window_of(ctx.model, s.sliding_window_cache, s.kv_block_size)


def _decode_kernel(ctx: StepContext) -> B.AttentionKernel:
    """The decode attention kernel: ``flash_decoding`` means FlashMLA for MLA models (what vLLM and SGLang run);
    ``torch_sdpa`` the SDPA call form of ``serving.attention_call`` or the kernel set."""
    name = ctx.serving.attention
    if name == "flash_decoding" and ctx.model.mla is not None:
        name = "flash_mla"
    if name == "torch_sdpa":  # PyTorch SDPA's rate depends on how it is called (serving.attention_call)
        return B.SDPA_CALLS[ctx.serving.attention_call or B.KERNEL_SETS[ctx.serving.kernels].sdpa_call]
    return B.ATTENTION_KERNELS[name]


def _log(entries: list, op: CommOp, t: OpTiming, backend: str) -> None:
    if op.dim == "ep" and op.op == "all_to_all":   # MoE dispatch / combine: the backend's kernels, always listed
        entries.append({"dim": "ep", "op": op.name, "bytes": t.bytes, "algorithm": t.algorithm, "link": t.link,
                        "time_s": t.call_s, "name": backend})
    elif t.call_s > 0:
        entries.append({"dim": op.dim, "op": op.op, "bytes": op.bytes, "algorithm": t.algorithm, "link": t.link,
                        "time_s": t.call_s, "name": op.name})


def _custom_all_reduce(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, op: CommOp, stage: int
                       ) -> OpTiming | None:
    """A TP all-reduce by the serving engine's custom kernel (``serving.tp_allreduce``), where its rule runs one
    (:func:`simulator.collectives.custom_allreduce.choose`: one node, NVLink, the engine's group sizes and size
    limit): the kernel's measured latency where a table covers the call (Hopper, the TP size and buffer of
    :data:`simulator.serving.backends.TP_ALLREDUCE`), else the one-/two-shot model; None: NCCL."""
    engine = ctx.serving.tp_allreduce
    if engine == "nccl" or op.dim != "tp" or op.op != "all_reduce":
        return None
    placement = timer.model("tp", stage).placement
    chosen = choose(engine, placement, op.bytes)
    if chosen is None:
        return None
    table = B.TP_ALLREDUCE.get(engine)
    measured = (table.time_s(rp.parallel.tp, op.bytes)
                if table is not None and ctx.gpu.architecture == table.architecture else None)
    return OpTiming(chosen[1] if measured is None else measured, f"{engine}/{chosen[0]}", "nvlink")


def _comm(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, op: CommOp, stage: int, log: list) -> float:
    """One call of ``op`` on stage ``stage``'s group (:class:`GroupTimer`), or by the serving engine's custom
    all-reduce kernel (:func:`_custom_all_reduce`)."""
    t = _custom_all_reduce(ctx, rp, timer, op, stage) or timer.time(op, stage)
    _log(log, op, t, rp.moe_backend.name)
    return t.call_s


#: the breakdown class of each dimension's comm ops
_COMM_CLASS = {"tp": "tp_comm", "ep": "ep_comm", "pp": "pp_comm"}


def _moe_settings(ctx: StepContext, phase: str) -> MoeSettings:
    """The scenario's ``moe:`` settings for the phase (the backend is the plan's: :func:`step_time`)."""
    settings = ctx.moe_settings
    if phase == "prefill" and settings.seed is not None:
        # thousands of tokens per rank average the routing out; decode samples one batch
        return type(settings).model_validate({**settings.model_dump(), "seed": None})
    return settings


def _add(acc: dict[str, float], priced: dict[str, float]) -> None:
    for key, value in priced.items():
        acc[key] += value


def _layer(ctx, rp, timer, stage, layer, batch, acc, log, verify=False, parts: tuple[Batch, ...] = ()) -> None:
    """Add one layer's seconds to ``acc`` (by op class): its program priced, then its collectives. With ``parts``
    (a mixed step: ``batch`` is all their new tokens as one) the attention is each part's own op, priced apart."""
    moe = ctx.model.is_moe_layer(layer)
    imbalance = timer.moe_routing(stage).imbalance if moe and rp.parallel.ep > 1 else 1.0
    kv_bytes, cache, cache_len = (kv_cache_bytes_per_token_layer(rp), B.KV_CACHES[ctx.serving.kv_cache_impl],
                                  ctx.serving.input_len + ctx.serving.output_len)
    program = serving_layer_program(
        rp, batch, rp.gemm_dtype(ctx.gpu), rp.weight_dtype(ctx.gpu), layer_index=layer,
        kv_token_bytes=kv_bytes, kernels=B.KERNEL_SETS[ctx.serving.kernels],
        decode_kernel=_decode_kernel(ctx), expert_kernel=B.EXPERT_KERNELS[ctx.serving.expert_kernel],
        imbalance=imbalance, kv_cache=cache, cache_len=cache_len, verify=verify)
    if parts:
        program = replace(program, attention=None)
        for part in parts:
            op = cache_attention(rp, part, kv_bytes, _decode_kernel(ctx), cache, cache_len, layer_index=layer)
            acc["attention"] += price_serving(LayerProgram(kind=program.kind, attention=op), ctx.gpu, ctx.eff)[
                "attention"]
    _add(acc, price_serving(program, ctx.gpu, ctx.eff))
    for op in program.comm:
        acc[_COMM_CLASS[op.dim]] += _comm(ctx, rp, timer, op, stage, log)


#: op classes a micro-batch computes before its router under two-batch overlap (simulator/serving/tbo.py)
_BEFORE_ROUTER = ("gemm", "attention", "memory_ops", "launch", "tp_comm")


def _tbo_layer(ctx, rp, halves, stage, layer, acc, log, verify: bool = False) -> None:
    """Add one MoE layer of two overlapped micro-batches to ``acc`` (:mod:`simulator.serving.tbo`): each half's
    classes as priced, and as ``ep_comm`` only what its dispatch/combine adds beyond the compute they hide under."""
    parts, ep = [], {"dispatch": [], "combine": []}
    for i, (timer, half) in enumerate(halves):
        one, sub = dict.fromkeys(OP_CLASSES, 0.0), []
        _layer(ctx, rp, timer, stage, layer, half, one, sub, verify)
        parts.append(one)
        for name in ep:
            ep[name].append(sum(e["time_s"] for e in sub if e["dim"] == "ep" and e["op"] == name))
        log.extend({**e, "micro_batch": i} for e in sub)
    slow = sm_slowdown(ctx.gpu.sms, halves[0][0].moe_comm(stage).reserved_sms)
    layer_s = tbo_layer_s(tuple(sum(p[k] for k in _BEFORE_ROUTER) for p in parts),
                          tuple(p["experts"] for p in parts), tuple(ep["dispatch"]), tuple(ep["combine"]), slow)
    for key in OP_CLASSES:
        if key != "ep_comm":
            acc[key] += sum(p[key] for p in parts)
    acc["ep_comm"] += layer_s - sum(sum(v for k, v in p.items() if k != "ep_comm") for p in parts)


def _stage(ctx: StepContext, rp: ResolvedPlan, timer: GroupTimer, stage: int, batch: Batch,
           log: list, halves=None, verify: bool = False, parts: tuple[Batch, ...] = ()) -> tuple[dict[str, float], int]:
    """Seconds by op class and kernels of one pipeline stage for one step (its outgoing hand-off included). A
    speculative verify step (``verify``) takes logits of every new token, not only each sequence's last; a mixed
    step (``parts``) one token per part's sequence."""
    model, p = ctx.model, rp.parallel
    kset = B.KERNEL_SETS[ctx.serving.kernels]
    acc = dict.fromkeys(OP_CLASSES, 0.0)
    # MTP modules (model.mtp_layers, after the last layer) only draft under speculative decoding: priced apart
    # (simulator/serving/speculative.py)
    layers = [layer for layer in rp.stage_layers[stage] if layer < model.layers]
    kernels = kset.per_layer * len(layers) + kset.per_moe_layer * sum(map(model.is_moe_layer, layers))
    kinds: dict[bool, list[int]] = {}
    for layer in layers:  # layers of one kind (dense / MoE) cost the same: price one, count all
        kinds.setdefault(model.is_moe_layer(layer), []).append(layer)
    for moe, group in kinds.items():
        one = dict.fromkeys(OP_CLASSES, 0.0)
        before = len(log)
        if moe and halves is not None:  # two-batch overlap: each MoE layer runs twice, on half the batch
            kernels += (kset.per_layer + kset.per_moe_layer) * len(group)
            _tbo_layer(ctx, rp, halves, stage, group[0], one, log, verify)
        else:
            _layer(ctx, rp, timer, stage, group[0], batch, one, log, verify, parts)
        for entry in log[before:]:
            entry["count"] = len(group)
        for key, value in one.items():
            acc[key] += value * len(group)
    if stage == 0:
        _add(acc, price_serving(serving_embedding_program(rp, batch), ctx.gpu, ctx.eff))
    if stage == p.pp - 1:
        kernels += kset.per_step
        if parts:
            logits = Batch(sum(q.sequences for q in parts), 1)
        else:
            logits = Batch(batch.tokens, 1, batch.cached) if verify else batch
        _add(acc, price_serving(serving_head_program(rp, logits, rp.gemm_dtype(ctx.gpu), rp.weight_dtype(ctx.gpu)),
                                ctx.gpu, ctx.eff))
        ops = serving_step_traffic(rp, logits)
    else:
        ops = serving_boundary_traffic(rp, batch)
    for op in ops:
        acc[_COMM_CLASS[op.dim]] += _comm(ctx, rp, timer, op, stage, log)
    return acc, kernels


def _tbo_halves(ctx: StepContext, rp: ResolvedPlan, batch: Batch, phase: str):
    """(timer, micro-batch) of the two micro-batches under ``serving.two_batch_overlap`` (a MoE model with EP > 1
    and a batch of more than one token), else None."""
    split = split_batch(batch) if ctx.serving.two_batch_overlap and ctx.model.moe and rp.parallel.ep > 1 else None
    if split is None:
        return None
    moe = _moe_settings(ctx, phase)
    return tuple((GroupTimer(rp, ctx.topology, calibration=ctx.calibration, moe=moe, batch=half), half)
                 for half in split)


def step_time(ctx: StepContext, rp: ResolvedPlan, batch: Batch, *, phase: str, graphs: bool,
              microbatches: int = 1, parts: tuple[Batch, ...] = ()) -> StepTime:
    """One step of ``batch`` (its sequences adding ``new`` tokens on ``cached`` ones; module docstring) under the
    scenario's plan ``rp``: the rank shape is ``rp.shape_of(batch)``. ``phase``: prefill, decode, or verify (a
    speculative verify step: decode's kernels and backend over ``new`` = k + 1 tokens per sequence, logits of each).

    ``microbatches`` m > 1 (pipeline parallelism, decode): the step's sequences are m micro-batches of ``seqs`` each
    in flight over the stages at once (vLLM's virtual engines); every sequence advances one token in
    ``max(sum of stage times, m x the slowest stage)`` (one traversal, or the slowest stage busy with all m); the
    breakdown is scaled to that total."""
    rp = rp.with_moe_backend(serving_backend(ctx.serving.all2all_backend).for_phase(phase))  # the phase's backend
    timer = GroupTimer(rp, ctx.topology, calibration=ctx.calibration, moe=_moe_settings(ctx, phase), batch=batch)
    log: list[dict] = []
    model, p = ctx.model, rp.parallel
    halves = None if parts else _tbo_halves(ctx, rp, batch, phase)  # a mixed step runs as one batch
    stages = [_stage(ctx, rp, timer, stage, batch, log, halves, phase == "verify", parts) for stage in range(p.pp)]
    acc = {key: sum(a[key] for a, _ in stages) for key in OP_CLASSES}
    kernels = microbatches * sum(k for _, k in stages)
    gpu_s = sum(acc.values())
    if microbatches > 1:
        pipelined = max(gpu_s, microbatches * max(sum(a.values()) for a, _ in stages))
        acc = {key: value * pipelined / gpu_s for key, value in acc.items()}
        gpu_s = pipelined
    kset = B.KERNEL_SETS[ctx.serving.kernels]
    if model.moe is not None and p.ep > 1 and not rp.moe_backend.graph_capturable:
        graphs = False  # the step cannot be captured: the host issues every kernel
    # the per-layer tensor-parallel all-reduces (attention and MLP outputs), issued through torch.distributed
    per_layer = sum(op.dim == "tp" and op.op == "all_reduce" for op in serving_layer_traffic(rp, batch))
    collectives = per_layer * microbatches * sum((2 if halves and model.is_moe_layer(layer) else 1)
                                                 for s in range(p.pp) for layer in rp.stage_layers[s]
                                                 if layer < model.layers)  # two-batch overlap: MoE layers twice
    kernels += collectives
    host = 0.0 if graphs else (kernels - collectives) * kset.host_launch_s + collectives * kset.collective_host_s
    if host > gpu_s:
        acc["host"] = host - gpu_s
    serial = kset.step_host_s if phase != "prefill" else 0.0  # host work the GPU waits for (HF compiled generate)
    acc["host"] += serial
    return StepTime(step_s=max(gpu_s, host) + serial, breakdown_s=acc, kernels=kernels, gpu_s=gpu_s,
                    comm=tuple(log))


def captured(serving: ServingConfig, seqs: int) -> bool:
    """A decode step of ``seqs`` sequences replays a CUDA graph: ``serving.cuda_graphs`` on and ``seqs`` one of
    ``serving.cuda_graph_batch_sizes`` (None: every size). An engine that captures a list and does not pad (TensorRT-LLM's
    PyTorch backend, ``_maybe_get_cuda_graph``) issues any other batch eagerly."""
    sizes = serving.cuda_graph_batch_sizes
    return serving.cuda_graphs and (sizes is None or seqs in sizes)


def mixed_step_time(ctx: StepContext, rp: ResolvedPlan, parts: tuple[Batch, ...]) -> StepTime:
    """One forward over every part of a mixed step (prefill chunks and decodes, each a :class:`Batch`), as vLLM V1
    and TensorRT-LLM's in-flight batching run it: the layers' GEMMs, memory-bound kernels, experts and collectives
    on the summed new tokens (``Batch(1, tokens)``: the weights read once), the attention of each part on its own
    cache, the LM head on one token per sequence. A step with any prefill chunk takes the prefill phase (its
    all-to-all backend, no CUDA graph: the host issues every kernel, as for a prefill step)."""
    tokens = sum(q.tokens for q in parts)
    decode = all(q.new == 1 for q in parts)
    return step_time(ctx, rp, Batch(1, tokens), phase="decode" if decode else "prefill",
                     graphs=decode and captured(ctx.serving, sum(q.sequences for q in parts)), parts=tuple(parts))
