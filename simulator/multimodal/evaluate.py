"""One submodule on its own GPUs, priced by the single-stack engine, and the exchanges between submodules.

:func:`evaluate_submodule` resolves the submodule's plan with :func:`simulator.plan.resolve_plan` (the stack of
:meth:`SubmoduleSpec.engine_model`, ``seq_len`` = its tokens per sample, ``global_batch`` = the model's batch),
estimates its memory with :func:`simulator.memory.estimate_memory` and times its step with
:func:`simulator.schedule.simulate_step` on a view of the topology whose rank r is the submodule's r-th GPU, so its
TP / DP / PP groups are priced on the links its placement gives it. What the engine does not have is added: the
parameters of the real input table, the cross-attention blocks and the attentional pooler
(:meth:`MultimodalSpec.extra_params`: on the first stage, the pooler's on the last), the cross-attention GEMMs of a
CoCa decoder (:func:`cross_attention_s`) and the attentional pooler's GEMMs on a CoCa image encoder
(:func:`pooler_s`), each a program (:mod:`simulator.program.multimodal`) priced by
:func:`simulator.pricing.compute.price` (:func:`priced`).

The pipeline runs in batch-sync order (GPipe: every micro-batch's forward before the loss, DistMM section 4.4):
a contrastive loss needs the embeddings of the whole batch before any backward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from simulator.caching import IdentityCache, memo
from simulator.compute import default_efficiency
from simulator.compute.layer import LayerTime
from simulator.errors import UserError
from simulator.hardware import GpuSpec
from simulator.memory import MemoryReport, estimate_memory
from simulator.memory.items import MemoryItem
from simulator.model import ModelSpec, param_counts
from simulator.multimodal.activations import submodule_activation_items
from simulator.multimodal.spec import MultimodalSpec, SubmoduleSpec
from simulator.plan import ResolvedPlan, resolve_plan
from simulator.plan.schedules import GPIPE, ONE_F_ONE_B
from simulator.pricing.compute import price
from simulator.program import LayerProgram
from simulator.program.multimodal import attention_gemms, cross_attention_program, pooler_program
from simulator.schedule import StepResult, simulate_step
from simulator.schedule.cache import StepCache
from simulator.topology import Topology
from simulator.units import GIBI


@dataclass(frozen=True)
class PlanChoice:
    """A submodule's plan: degrees, micro-batch and recompute (what the partitioner and balancer choose)."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    recompute: str = "none"
    sp: bool = False
    distributed_optimizer: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "tp": self.tp, "pp": self.pp, "dp": self.dp, "micro_batch": self.micro_batch,
                "recompute": self.recompute, "sp": self.sp}


@dataclass(frozen=True)
class SubmoduleRun:
    """A submodule's predicted memory and step on its GPUs."""

    sub: SubmoduleSpec
    choice: PlanChoice
    gpus: tuple[int, ...]
    """Global GPU indices, in the submodule's rank order."""
    plan: ResolvedPlan
    memory: MemoryReport
    extra_bytes: float
    """Per-GPU bytes of :meth:`MultimodalSpec.extra_params` on the first stage (states under the plan's recipe),
    the attentional pooler's excepted (:attr:`pooler_bytes`)."""
    step: StepResult
    cross_attention_s: float
    extra_params: float = 0.0
    """:meth:`MultimodalSpec.extra_params` of the submodule (parameters its engine model lacks)."""
    pooler_s: float = 0.0
    """Seconds per step of the attentional pooler (:func:`pooler_s`)."""
    pooler_bytes: float = 0.0
    """Per-GPU bytes of the attentional pooler's states, on the last stage."""
    extra_activations: tuple[tuple[MemoryItem, ...], ...] = ()
    """Per stage, the activation items the engine's stack lacks (cross-attention blocks, attentional pooler:
    :func:`simulator.multimodal.activations.submodule_activation_items`)."""

    @property
    def step_s(self) -> float:
        """The engine's step plus the cross-attention and pooler GEMMs."""
        return self.step.step_s + self.cross_attention_s + self.pooler_s

    @property
    def compute_s(self) -> float:
        return self.step.compute_s + self.step.recompute_s + self.cross_attention_s + self.pooler_s

    @property
    def forward_microbatch_s(self) -> float:
        """One forward micro-batch (a third of the compute per micro-batch: backward is twice forward), the pooler's
        included: what a consumer of this submodule's tokens waits before its first micro-batch (the DistMM step's
        fill)."""
        return (self.step.compute_s + self.pooler_s) / (3 * self.plan.num_microbatches)

    @cached_property
    def extra_activation_bytes(self) -> tuple[float, ...]:
        """Per stage, the bytes of :attr:`extra_activations` (0 where there are none)."""
        per = [sum(i.bytes for i in items) for items in self.extra_activations]
        return tuple(per[s.stage] if s.stage < len(per) else 0.0 for s in self.memory.stages)

    @cached_property
    def stage_peaks(self) -> tuple[float, ...]:
        """Tensor peak per stage: the engine's, the extra parameters' states on stage 0 and the pooler's on the
        last stage, and the activations the engine lacks (:attr:`extra_activations`)."""
        return stage_peaks_with_extras([s.peak for s in self.memory.stages], self.extra_bytes, self.pooler_bytes,
                                       self.extra_activation_bytes)

    @property
    def device_peak_bytes(self) -> float:
        return max(self.stage_peaks) + self.memory.runtime_bytes

    @property
    def oom(self) -> bool:
        cap = self.memory.hbm_capacity_bytes
        return cap is not None and self.device_peak_bytes > cap

    def to_dict(self) -> dict:
        s, m = self.step, self.memory
        return {
            "role": self.sub.role, "tokens_per_sample": self.plan.training.seq_len, **self.choice.to_dict(),
            "micro_batches": self.plan.num_microbatches, "gpu_ids": list(self.gpus),
            "params": self.params,
            "memory": {"device_peak_bytes": self.device_peak_bytes, "peak_GiB": self.device_peak_bytes / GIBI,
                       "extra_params_bytes": self.extra_bytes, "oom": self.oom,
                       "stages": [self._stage_dict(st, pk, act) for st, pk, act in
                                  zip(m.stages, self.stage_peaks, self.extra_activation_bytes, strict=True)]},
            "time": {"step_s": self.step_s, "compute_s": s.compute_s, "recompute_s": s.recompute_s,
                     "bubble_s": s.bubble_s, "optimizer_s": s.optimizer_s, "cross_attention_s": self.cross_attention_s,
                     "pooler_s": self.pooler_s,
                     "exposed_comm_s": dict(s.exposed_comm_s)},
        }

    @staticmethod
    def _stage_dict(stage, peak: float, extra_activations: float) -> dict:
        """docs/interface.md's stage object, its ``activations`` and ``total`` with the activations the engine lacks
        (also on their own: ``extra_activations``), and ``peak`` with every extra."""
        out = stage.to_dict()
        out["activations"] += extra_activations
        out["total"] += extra_activations
        return {**out, "extra_activations": extra_activations, "peak": peak}

    @property
    def params(self) -> float:
        return param_counts(self.plan.model)["total"] + self.extra_params


def stage_peaks_with_extras(peaks: list[float], extra_bytes: float, pooler_bytes: float,
                            activations: tuple[float, ...]) -> tuple[float, ...]:
    """Per stage: the engine's tensor peak, the extra parameters' states on stage 0 (``extra_bytes``), the
    pooler's on the last stage and the extra activations of each stage (the one rule for runs and searches)."""
    last = len(peaks) - 1
    return tuple(pk + (extra_bytes if s == 0 else 0.0) + (pooler_bytes if s == last else 0.0) + activations[s]
                 for s, pk in enumerate(peaks))



def replica_batch(global_batch: int, dp: int, micro_batch: int) -> int:
    """Samples one replica runs: ceil(B / dp) rounded up to whole micro-batches. When dp does not divide the
    batch, the largest replica sets the pace (the others idle), so the padding is paid, not hidden."""
    per = -(-global_batch // dp)
    return -(-per // micro_batch) * micro_batch


def resolve_submodule(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, global_batch: int,
                      precision: str, optimizer: str) -> ResolvedPlan:
    """The engine plan of one submodule (errors re-keyed to ``multimodal.plans.<name>``)."""
    seq = spec.seq_len(sub)
    parallel = {"tp": choice.tp, "pp": choice.pp, "dp": choice.dp, "recompute": choice.recompute, "sp": choice.sp,
                "schedule": (GPIPE if "contrastive" in spec.loss else ONE_F_ONE_B).name,
                "distributed_optimizer": choice.distributed_optimizer}
    padded = replica_batch(global_batch, choice.dp, choice.micro_batch) * choice.dp
    training = {"seq_len": seq, "micro_batch": choice.micro_batch, "global_batch": padded,
                "precision": precision, "optimizer": optimizer}
    try:
        return resolve_plan(engine_model(sub, seq), parallel, training, choice.gpus)
    except UserError as exc:
        key = (exc.key_path or "").split(".")[-1]
        raise UserError(f"submodule {sub.name!r}: {exc.message}",
                        key_path=f"multimodal.plans.{sub.name}" + (f".{key}" if key else "")) from None


@memo(maxsize=256)
def engine_model(sub: SubmoduleSpec, seq_len: int) -> ModelSpec:
    """:meth:`SubmoduleSpec.engine_model`, one object per submodule and length: every plan of a submodule then holds
    the same model, so a :class:`~simulator.schedule.cache.StepCache` shared by its plans (it keys on the model's
    identity) keeps its entries from plan to plan."""
    return sub.engine_model(seq_len)


def extra_state_bytes(plan: ResolvedPlan, params: float) -> float:
    """Per-GPU bytes of ``params`` extra parameters held by a TP rank of stage 0 under the plan's recipe (weights,
    gradients, fp32 main copy, moments; the sharded ones over the replicas as the recipe's stage says:
    :meth:`simulator.plan.Recipe.per_param` over the dense shard degree)."""
    return params / plan.parallel.tp * plan.recipe.per_param(plan.dense_shard_degree)


def cross_attention_gemms(b: int, text_tokens: int, image_tokens: int, hidden: int, image_hidden: int, heads: int,
                          tp: int = 1, mlp: int = 0, mlp_up: int = 1
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(m, k, n, batch) of the forward GEMMs of one cross-attention block on one TP rank for a micro-batch of b
    samples, as :func:`simulator.program.multimodal.attention_gemms` builds them (T text tokens of width h attend
    to N image tokens of width h_v): Q, O, K, V projections, scores Q K^T, values P V, then the MLP's up- and
    down-projections with ``mlp``. Forward FLOPs = sum 2 m k n batch = (4 bT h^2 + 4 bN h_v h + 4 bT N h) / t
    (+ (2 mlp_up + 2) bT h f / t). The attentional pooler is the same attention with its queries as the T tokens."""
    ops = [g for g, _ in attention_gemms("cross_attn", b, text_tokens, image_tokens, hidden, image_hidden, heads, tp,
                                         "bf16", mlp, mlp_up)]
    return tuple(np.array([getattr(g, f) for g in ops], dtype=float) for f in ("m", "k", "n", "batch"))


def priced(program: LayerProgram, gpu: GpuSpec) -> LayerTime:
    """A multimodal module's program priced by :func:`simulator.pricing.compute.price` at the GPU's shipped
    efficiency table (what the engine's GEMMs use without a calibration)."""
    return price(program, gpu, default_efficiency(gpu.architecture))


def cross_attention_s(spec: MultimodalSpec, sub: SubmoduleSpec, plan: ResolvedPlan, gpu: GpuSpec, dtype: str
                      ) -> float:
    """Seconds per step of the cross-attention blocks the engine's stack lacks (CoCa's multimodal decoder): one
    block's program (:func:`simulator.program.multimodal.cross_attention_program`; N = the image encoder's output
    tokens, h_v its width), forward + backward. The pipeline's stages each run their share, so a step adds
    m x blocks / pp x (fwd + bwd) on the busiest stage (the pipeline fill and drain of these GEMMs are not
    modelled)."""
    if not sub.cross_attention_layers or spec.vision is None:
        return 0.0
    p = plan.parallel
    tokens, width = spec.image_kv
    mlp = (sub.ffn_hidden or 4 * sub.hidden) if sub.cross_attention_mlp else 0
    block = priced(cross_attention_program(plan.batch, tokens, sub.hidden, width, sub.heads, p.tp, dtype, mlp,
                                           2 if sub.activation == "swiglu" else 1), gpu)
    return (block.fwd_s + block.bwd_s) * sub.cross_attention_layers / p.pp * plan.num_microbatches


def pooler_s(sub: SubmoduleSpec, plan: ResolvedPlan, gpu: GpuSpec, dtype: str) -> float:
    """Seconds per step of the attentional pooler(s) on the encoder's last stage (:class:`PoolerSpec`): their
    program (:func:`simulator.program.multimodal.pooler_program`: each pooler's queries over the encoder's N tokens
    of width h_v), forward + backward, x m micro-batches (the whole pooler sits on the last stage)."""
    pool = sub.attentional_pooler
    if pool is None:
        return 0.0
    one = priced(pooler_program(plan.batch, pool.query_counts, sub.own_tokens, pool.width, sub.hidden, pool.heads,
                                plan.parallel.tp, dtype), gpu)
    return (one.fwd_s + one.bwd_s) * plan.num_microbatches


def evaluate_submodule(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, gpus: tuple[int, ...],
                       topology: Topology, global_batch: int, precision: str = "bf16", optimizer: str = "adam",
                       calibration=None, cache: StepCache | None = None) -> SubmoduleRun:
    """Memory and step of ``sub`` under ``choice`` on the global GPUs ``gpus`` (module docstring); ``cache``: a
    :class:`~simulator.schedule.cache.StepCache` the caller shares between the plans of ``sub`` on these GPUs (the
    searches of :mod:`simulator.multimodal.balance`), None: one of this step's own. What does not depend on the
    GPUs (plan, memory, the extra GEMMs' seconds) comes from :func:`submodule_memory` and :func:`extra_gemms_s`,
    once per plan."""
    plan, memory, activations = submodule_memory(spec, sub, choice, global_batch, precision, optimizer)
    gpu = topology.cluster.node.gpu
    memory = replace(memory, hbm_capacity_bytes=gpu.memory.capacity)   # the same report, flagged against the GPU
    view = topology.with_ranks_on(tuple(gpus))   # rank r of the plan on GPU gpus[r]
    step = simulate_step(plan.model, plan, view, calibration=calibration, cache=cache)
    extra_params, pooler = spec.extra_params(sub), spec.pooler_params(sub)
    cross_s, pool_s = extra_gemms_s(spec, sub, choice, global_batch, precision, optimizer, gpu)
    return SubmoduleRun(sub, choice, tuple(gpus), plan, memory, extra_state_bytes(plan, extra_params - pooler), step,
                        cross_s, extra_params, pool_s, extra_state_bytes(plan, pooler), activations)


#: plans whose :func:`submodule_memory` is kept (a DistMM search weighs each plan on several GPU sets of one size)
PLAN_MEMO = 1024


@memo(maxsize=PLAN_MEMO)
def submodule_memory(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, global_batch: int, precision: str,
                     optimizer: str) -> tuple[ResolvedPlan, MemoryReport, tuple[tuple[MemoryItem, ...], ...]]:
    """The plan of ``sub`` under ``choice`` (:func:`resolve_submodule`; raises its UserError), its memory
    (:func:`simulator.memory.estimate_memory`, no capacity) and the activation items the engine lacks
    (:func:`simulator.multimodal.activations.submodule_activation_items`), by what they read: a search asks for
    the same plan's memory check and run on every GPU set of its size; the topology plays no part."""
    plan = resolve_submodule(spec, sub, choice, global_batch, precision, optimizer)
    return plan, estimate_memory(plan), submodule_activation_items(spec, sub, plan)


def extra_gemms_s(spec: MultimodalSpec, sub: SubmoduleSpec, choice: PlanChoice, global_batch: int, precision: str,
                  optimizer: str, gpu: GpuSpec) -> tuple[float, float]:
    """(:func:`cross_attention_s`, :func:`pooler_s`) of the plan of :func:`submodule_memory` on ``gpu``, kept by
    the GPU's identity (its spec is not hashable) and the plan's arguments."""
    return _EXTRA_GEMMS((gpu,), (spec, sub, choice, global_batch, precision, optimizer))


def _extra_gemms(objects: tuple, values: tuple) -> tuple[float, float]:
    (gpu,), plan = objects, submodule_memory(*values)[0]
    dtype = plan.gemm_dtype(gpu)
    return cross_attention_s(values[0], values[1], plan, gpu, dtype), pooler_s(values[1], plan, gpu, dtype)


_EXTRA_GEMMS = IdentityCache(_extra_gemms, PLAN_MEMO)
