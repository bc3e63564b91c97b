"""A validated plan with its derived values (dp, expert-dp, micro-batches, layers per stage) and rank groups."""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field

from simulator.hardware.gpu import GpuSpec
from simulator.implementation.moe_backends import NCCL, MoeBackend
from simulator.model.shape import RankShape
from simulator.model.spec import ModelSpec
from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.offload import Offload, offload_of
from simulator.plan.ranks import (
    ALL_DIMS,
    COMBINED,
    DENSE_DIMS,
    EXPERT_DIMS,
    RankGrid,
    grid_groups,
    group_containing,
)
from simulator.plan.recipe import Recipe, resolve_recipe
from simulator.plan.schedules import Schedule, schedule_named
from simulator.plan.shape import Batch, padded_vocab, rank_shape


def layer_recompute(recompute: str, recompute_layers: int | None, chunks: tuple[int, ...]) -> tuple[str, ...]:
    """The recompute mode of each layer of a stage whose model chunks hold ``chunks`` layers:
    :meth:`ResolvedPlan.layer_recompute` from the values it reads (``parallel.recompute``,
    ``parallel.recompute_layers``)."""
    if recompute != "full" or recompute_layers is None:
        return (recompute,) * sum(chunks)
    return tuple("full" if pos < recompute_layers else "none" for n in chunks for pos in range(n))


class ResolvedPlan(BaseModel):
    """Output of :func:`simulator.plan.resolve_plan`; every cross-field rule has been checked."""

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    model: ModelSpec
    parallel: ParallelPlan
    training: TrainingConfig
    world_size: int = Field(ge=1, description="GPUs in the job")
    dp: int = Field(ge=1, description="data parallel size (derived when omitted)")
    edp: int = Field(ge=1, description="expert data parallel size = tp*cp*ulysses*dp / (ep*etp)")
    num_microbatches: int = Field(ge=1, description="micro-batches per step per DP rank (gradient accumulation)")
    order: tuple[str, ...] = Field(description="rank order, fastest first, ulysses included")
    stage_layers: tuple[tuple[int, ...], ...] = Field(description="global layer indices held by each PP rank")
    stage_chunks: tuple[tuple[int, ...], ...] = Field(description="layers of each virtual chunk of each PP rank")
    notes: tuple[str, ...] = Field((), description="facts worth saying (replicated K/V heads, padded vocab)")
    moe_backend: MoeBackend = Field(NCCL, description="what moves MoE tokens (simulator.implementation.moe_backends): the "
                                                      "scenario's moe.backend, or serving's all-to-all backend")

    def with_moe_backend(self, backend: MoeBackend) -> ResolvedPlan:
        """This plan with MoE backend ``backend`` (itself when it already has it): a serving phase's backend, or
        the ``moe:`` settings a caller of ``simulate_step`` passes."""
        if backend is self.moe_backend:     # registered objects: one per backend
            return self
        return type(self)(**{**{name: getattr(self, name) for name in type(self).model_fields},
                             "moe_backend": backend})

    @cached_property
    def offload(self) -> Offload:
        """What the plan keeps off the GPU (:mod:`simulator.plan.offload`)."""
        return offload_of(self.parallel, self.training)

    @cached_property
    def recipe(self) -> Recipe:
        """What the precision, optimizer, framework and sharding imply (:mod:`simulator.plan.recipe`)."""
        return resolve_recipe(self.parallel, self.training)

    @cached_property
    def batch(self) -> Batch:
        """The training micro-batch: ``micro_batch`` sequences of ``seq_len`` tokens (:mod:`simulator.plan.shape`)."""
        return Batch.of_training(self.training)

    @cached_property
    def shape(self) -> RankShape:
        """One rank's share of a layer for one training micro-batch: ``shape_of(self.batch)``."""
        return self.shape_of(self.batch)

    def shape_of(self, batch: Batch) -> RankShape:
        """One rank's share of a layer for ``batch`` under this plan's degrees (:mod:`simulator.plan.shape`), cached
        by the batch (the plan is frozen; a batch's cached tokens do not change the shape, but keying by the whole
        value keeps the cache obviously right)."""
        hit = self._shapes.get(batch)
        if hit is None:
            p = self.parallel
            hit = self._shapes[batch] = rank_shape(self.model, batch.new, batch.sequences, tp=p.tp, cp=p.cp,
                                                   ulysses=p.ulysses, ep=p.ep, etp=p.etp, sp=p.sp,
                                                   vocab_padding=self.recipe.megatron_vocab_padding,
                                                   redundant_experts=p.redundant_experts)
        return hit

    @cached_property
    def _shapes(self) -> dict[Batch, RankShape]:
        return {}

    def gemm_dtype(self, gpu: GpuSpec) -> str:
        """The tensor-core dtype of the plan's GEMMs on ``gpu``: the recipe's (``fp8``, ``fp8_block``, ``fp4``,
        ``bf16``...) where the GPU has tensor cores for it, else bf16 (an fp8 recipe on an A100 runs bf16 GEMMs).
        Training, serving, memory and multimodal all ask this one method."""
        return self.recipe.gemm_dtype_on(gpu.dtypes)

    def weight_dtype(self, gpu: GpuSpec) -> str:
        """The dtype the linear layers' weights are stored and read in on ``gpu``: the recipe's GEMM dtype, also
        where the GPU lacks its tensor cores and the GEMMs compute in :meth:`gemm_dtype` (a serving engine runs an
        fp8 checkpoint on an A100 with weight-only kernels: vLLM's FP8 Marlin, vllm-project/vllm#5975)."""
        return self.recipe.gemm_dtype

    @property
    def vocab_held(self) -> int:
        """Rows of the word embedding and the output layer the weights hold: the vocabulary padded to a multiple
        of 128 x tp by Megatron-style frameworks (``Recipe.megatron_vocab_padding``; :func:`padded_vocab`), as
        memory counts it and the output-layer GEMM multiplies."""
        return padded_vocab(self.model.vocab, self.parallel.tp, self.recipe.megatron_vocab_padding)

    @property
    def kv_heads_tp(self) -> float:
        """K/V heads per TP rank (replicated when tp > kv_heads): the K/V projections' and the K/V cache's heads."""
        return self.shape.kv_heads_tp

    def layer_recompute(self, stage: int) -> tuple[str, ...]:
        """The recompute mode of each layer of ``stage`` (in ``stage_layers`` order): ``parallel.recompute``, except
        that with ``recompute_layers`` N only the first N layers of each model chunk are fully recomputed."""
        p = self.parallel
        return layer_recompute(p.recompute, p.recompute_layers, self.stage_chunks[stage])

    @cached_property
    def schedule(self) -> Schedule:
        """The pipeline schedule's registered object (:mod:`simulator.plan.schedules`): its orders, in-flight
        counts, stage placement, boundary calls and timeline kinds."""
        return schedule_named(self.parallel.schedule)

    @property
    def last_stage_rank(self) -> int:
        """The PP rank whose chunk runs the model's last stage (final norm, output head, loss, MTP modules): pp-1,
        or rank 0 with the V schedules (DualPipeV, ZB-V), whose V starts and ends there (deepseek-ai/DualPipe at
        3da1bbe, dualpipev.py: the loss is on the first rank; Qi et al. 2024, arXiv 2401.10241, Sec. 6: the V's
        last chunk on the first worker); :meth:`simulator.plan.schedules.Schedule.last_stage_rank`. With DualPipe
        rank 0 also runs it, for the second copy: :meth:`holds_stage`."""
        return self.schedule.last_stage_rank(self.parallel.pp)

    def holds_stage(self, rank: int, first: bool) -> bool:
        """Whether PP rank ``rank`` runs the model's first stage (``first``: the embedding) or its last (the head
        and loss): rank 0 and :attr:`last_stage_rank`; with DualPipe both end ranks run both, one per copy of the
        model (rank i runs stage i of one copy and stage pp-1-i of the other)."""
        return self.schedule.holds_stage(rank, first, self.parallel.pp)

    @property
    def dense_shard_degree(self) -> int:
        """d for dense weights: dp * cp * ulysses (docs/memory.md, "Precision recipes")."""
        return self.dp * self.parallel.cp * self.parallel.ulysses

    @property
    def expert_shard_degree(self) -> int:
        """d for expert weights: the expert data parallel size."""
        return self.edp

    def _sizes(self, expert: bool) -> dict[str, int]:
        p = self.parallel
        if expert:
            return {"tp": p.etp, "cp": 1, "ulysses": 1, "ep": p.ep, "dp": self.edp, "pp": p.pp}
        return {"tp": p.tp, "cp": p.cp, "ulysses": p.ulysses, "ep": 1, "dp": self.dp, "pp": p.pp}

    @cached_property
    def rank_layout(self) -> tuple:
        """The rank order and the dense and expert grid sizes: with the world size, what fixes every rank group (a
        value key shared by plans that differ in nothing else: group timings, NCCL's communicators)."""
        return (self.order, tuple(self._sizes(False).items()), tuple(self._sizes(True).items()), self.world_size)

    @cached_property
    def rank_grid(self) -> RankGrid:
        """:attr:`rank_layout` as a value object that answers which ranks share a group."""
        return RankGrid(*self.rank_layout)

    @cached_property
    def _memo(self) -> dict:
        """Per-plan memo of derived tables (rank groups, stage parameters): pure functions of this frozen plan."""
        return {}

    def rank_groups(self, dim: str) -> tuple[tuple[int, ...], ...]:
        """Global ranks of every group of ``dim``: tp, cp, ulysses, dp, pp (dense grid), etp, ep, edp (expert grid),
        or dp_cp (the dense data-parallel shard group dp x cp x ulysses)."""
        key = ("rank_groups", dim)
        if key not in self._memo:
            self._memo[key] = self._rank_groups(dim)
        return self._memo[key]

    def _rank_groups(self, dim: str) -> tuple[tuple[int, ...], ...]:
        return grid_groups(self.order, *self._grid_axes(dim))

    def rank_group_of(self, dim: str, rank: int) -> tuple[int, ...]:
        """The group of ``dim`` (as :meth:`rank_groups`) that holds global rank ``rank``, without building the
        others."""
        return group_containing(self.order, *self._grid_axes(dim), rank)

    def _grid_axes(self, dim: str) -> tuple[dict[str, int], tuple[str, ...]]:
        """The grid a ``dim`` group lives on (dense or expert sizes) and the grid axes it spans."""
        if dim in EXPERT_DIMS:
            return self._sizes(True), ({"etp": "tp", "ep": "ep", "edp": "dp"}[dim],)
        if dim in DENSE_DIMS:
            return self._sizes(False), (dim,)
        if dim in COMBINED:
            return self._sizes(False), COMBINED[dim]
        raise KeyError(f"unknown group dimension {dim!r}; known: {', '.join(ALL_DIMS)}")

    def all_rank_groups(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        """Every dimension's groups, keyed by name."""
        return {d: self.rank_groups(d) for d in ALL_DIMS}
