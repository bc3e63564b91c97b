"""The scenario's ``moe:`` section: which MoE backend moves the tokens, how the router spreads them, how the layer
reorders them (permute chain, grouped or sequential experts) and what overlaps; the cost models read it
(:func:`simulator.moe.comm_settings` turns it into the MoE cost model's :class:`~simulator.moe.CommSettings`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.errors import UserError
from simulator.implementation.moe_backends import MOE_BACKENDS, NCCL, MoeBackend, moe_backend

#: ``moe.backend`` names, from the registry (simulator/implementation/moe_backends.py)
Backend = Literal[tuple(MOE_BACKENDS)]  # type: ignore[valid-type]


def transport_problem(backend: str | MoeBackend, transport: str | None) -> str | None:
    """Why ``backend`` (a ``moe.backend`` name or object) cannot run over ``transport`` (None when it can;
    :meth:`simulator.plan.MoeBackend.transport_problem`). The cost model can still price that what-if through
    ``CommSettings``."""
    return moe_backend(backend).transport_problem(transport)


def check_histogram(counts: tuple[float, ...], experts: int | None = None) -> None:
    """A per-expert load histogram: one non-negative count per expert (``experts`` when known), not all zero."""
    if experts is not None and len(counts) != experts:
        raise UserError(f"the histogram has {len(counts)} counts; the model has {experts} experts (one count per "
                        "expert)", key_path="moe.histogram")
    negative = [i for i, c in enumerate(counts) if not c >= 0]
    if negative:
        raise UserError(f"expert {negative[0]} has count {counts[negative[0]]}; counts must be >= 0",
                        key_path="moe.histogram")
    if not sum(counts) > 0:
        raise UserError("every count is 0: the histogram needs a positive total", key_path="moe.histogram")


class MoeSettings(BaseModel):
    """``moe:``: expert-parallel communication backend, routing skew and overlap of every MoE layer.

    The defaults reproduce Megatron-LM's default token dispatcher (``alltoall``: NCCL all-to-all, one step after
    the other) with uniform expected routing. ``null`` fields are resolved per scenario by :func:`simulator.moe.comm_settings`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Field(NCCL.name, description="nccl (Megatron alltoall dispatcher) | deepep_normal | "
                                                 "deepep_low_latency | cpu_proxy (UCCL-EP)")
    transport: Literal["ibrc", "ibgda"] | None = Field(
        None, description="who issues internode RDMA: ibrc (CPU proxy) or ibgda (GPU); null: the backend's default, "
                          "or ibgda for DeepEP backends when system.net_issue is ibgda")
    qps: int | None = Field(None, ge=1, le=1024, description="queue pairs per peer (null: backend default)")
    dispatch_dtype: Literal["fp8", "bf16"] | None = Field(
        None, description="dispatch payload (combine is bf16); null: fp8 with the fp8 precision recipe, else bf16")
    distribution: Literal["uniform", "zipf", "histogram"] = Field(
        "uniform", description="expert popularity of the router: uniform, zipf (zipf_exponent) or histogram (measured "
                               "tokens per expert, the histogram key); shared by training and serving")
    histogram: tuple[float, ...] | str | None = Field(
        None, description="distribution: histogram: tokens (or any non-negative load) per expert, one per expert in "
                          "expert-id order (experts on EP rank r are r*E/ep .. (r+1)*E/ep - 1), or the path of a CSV "
                          "(relative to the scenario) whose rows end with each expert's count")
    zipf_exponent: float = Field(1.0, ge=0, le=10, description="s of p_i ~ (i+1)^-s (distribution: zipf); "
                                                               "hot experts sit on the first EP rank")
    node_limit: int | None = Field(None, ge=1, description="each token goes to experts on at most this many nodes "
                                                           "(DeepSeek-V3 node-limited routing; null: no limit)")
    overlap: Literal["sequential", "streamed"] | None = Field(
        None, description="dispatch -> expert FFN -> combine one after another, or streamed in chunks (tokens "
                          "computed as they arrive); null: sequential, as Megatron-Core runs every dispatcher: the "
                          "routed tokens are returned before the grouped GEMM starts (DeepEP through the flex "
                          "dispatcher too: megatron/core/transformer/moe/fused_a2a.py calls dispatch and combine "
                          "with async_finish=False); across micro-batches see microbatch_overlap")
    seed: int | None = Field(None, ge=0, description="null: expected token counts; an int: one sampled batch")
    permute: Literal["fused", "index_select", "index_copy", "gather_scatter"] = Field(
        "fused", description="how the layer reorders its tokens by expert and back: fused (Transformer Engine's "
                             "moe_permute / moe_unpermute, Megatron --moe-permute-fusion; DeepEP), index_select "
                             "(Megatron core_v0.10 onwards without the fusion: index_select + scatter_add), "
                             "index_copy (core_v0.7-v0.9: index_select + index_copy, probs, sum over k) or "
                             "gather_scatter (core_v0.5-v0.6's all-gather dispatcher: torch.gather / scatter / "
                             "scatter_add); measured chains in docs/moe.md")
    experts: Literal["grouped", "sequential"] = Field(
        "grouped", description="grouped: the local experts run as one grouped GEMM (--moe-grouped-gemm); "
                               "sequential: one dense GEMM per expert and an output assembly (Megatron's "
                               "SequentialMLP, the default without --moe-grouped-gemm)")
    microbatch_overlap: bool = Field(
        False, description="hide one micro-batch's dispatch/combine behind another micro-batch's compute: a stage's "
                           "back-to-back forward and backward of different micro-batches run merged (Megatron-Core "
                           "--overlap-moe-expert-parallel-comm, the 1F1B A2A overlap; DeepSeek DualPipe's overlapped "
                           "chunk pairs)")

    @model_validator(mode="after")
    def _check(self) -> MoeSettings:
        problem = transport_problem(self.backend, self.transport)
        if problem:
            raise UserError(problem, key_path="moe.transport")
        if (self.distribution == "histogram") != (self.histogram is not None):
            raise UserError("distribution: histogram and the histogram key go together (a per-expert list or a CSV "
                            f"path); got distribution {self.distribution} with histogram {self.histogram!r}",
                            key_path="moe.histogram")
        if isinstance(self.histogram, tuple):
            check_histogram(self.histogram)
        return self

    @property
    def router_distribution(self) -> str | tuple[float, ...]:
        """What the routing model takes (:func:`simulator.moe.route`): the name, or the per-expert loads."""
        return self.histogram if self.distribution == "histogram" else self.distribution

    def for_net_issue(self, net_issue: str) -> MoeSettings:
        """With ``system.net_issue: ibgda`` and no transport given, DeepEP backends issue RDMA from the GPU."""
        if self.transport is None and net_issue == "ibgda" and moe_backend(self.backend).gpu_issue:
            return self.model_copy(update={"transport": "ibgda"})
        return self


DEFAULT_MOE_SETTINGS = MoeSettings()
