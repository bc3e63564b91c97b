"""Implementation profiles: what a training framework or serving engine really runs, as data (issue 28). The
schema lives here, the shipped YAML files beside it, the registry in :mod:`simulator.implementation.registry`.

A profile (one YAML per framework and version under ``simulator/implementation/profiles/``, schema below, every
number with its source in ``sources:``) says how many kernels a layer launches per phase, how much host (CPU) time
each kernel and each device-to-host synchronisation costs, where the syncs are, the optimizer's implementation,
the MoE experts' implementation and the defaults the framework gives the scenario's ``training:`` keys. The
scenario names one (``training.framework``) and may override any field (``implementation:``); the plan carries
the result (``ResolvedPlan.implementation``) and every consumer reads its attributes, never its name.

Host issue time of one layer phase (seconds, docs/implementation_profiles.md):

    H = kernels x host.per_kernel_s + syncs x host.per_sync_s + host.measured_s
        (+ local experts x (per_expert kernels x per_kernel_s + per_expert syncs x per_sync_s + per_expert measured))

``host.measured_s`` holds host seconds measured directly per layer part (no kernel count behind them): the
Megatron-Core + TE MoE layer's floor of :mod:`simulator.compute.host`, whose numbers the ``megatron`` and
``pytorch`` profiles carry unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(extra="forbid", frozen=True)

Family = Literal["megatron", "pytorch", "serving"]
Launch = Literal["eager", "compile", "cuda_graphs"]


class LayerParts(BaseModel):
    """A count (or host seconds) per transformer layer and phase for one micro-batch; ``per_step``: per
    micro-batch outside the layers (embedding, final norm, LM head, loss; forward and backward together)."""

    model_config = _STRICT

    dense_forward: float = Field(0.0, ge=0, description="per dense layer forward")
    dense_backward: float = Field(0.0, ge=0, description="per dense layer backward (recomputed forward apart)")
    moe_forward: float = Field(0.0, ge=0, description="per MoE layer forward, experts apart (router, permute, ...)")
    moe_backward: float = Field(0.0, ge=0, description="per MoE layer backward, experts apart")
    per_expert_forward: float = Field(0.0, ge=0, description="added per local expert to a MoE layer forward")
    per_expert_backward: float = Field(0.0, ge=0, description="added per local expert to a MoE layer backward")
    per_step: float = Field(0.0, ge=0, description="per micro-batch outside the transformer layers")

    def layer(self, moe: bool, local_experts: float) -> tuple[float, float]:
        """(forward, backward) of one layer: the dense parts, or the MoE parts plus ``local_experts`` times the
        per-expert parts."""
        if not moe:
            return self.dense_forward, self.dense_backward
        return (self.moe_forward + self.per_expert_forward * local_experts,
                self.moe_backward + self.per_expert_backward * local_experts)


class HostCosts(BaseModel):
    """Host (CPU) seconds to issue work, measured on the H200 machine's CPU."""

    model_config = _STRICT

    per_kernel_s: float = Field(0.0, ge=0, description="one kernel launch from the framework's Python, autograd "
                                                       "and module dispatch included (s)")
    per_sync_s: float = Field(0.0, ge=0, description="one device-to-host synchronisation's own host cost (s); the "
                                                     "GPU drain it causes is the segment rule")
    measured_s: LayerParts = Field(LayerParts(), description="host seconds measured directly per layer part")


class Optimizer(BaseModel):
    """How the optimizer step is implemented."""

    model_config = _STRICT

    impl: Literal["fused", "foreach", "for_loop"] = Field("fused", description="torch.optim implementation")
    moments_dtype: Literal["fp32", "bf16"] = Field("fp32", description="storage dtype of Adam's moments")
    kernels_per_tensor: float = Field(0.0, ge=0, description="kernels per parameter tensor (for_loop: ~10 for "
                                                              "AdamW; fused / foreach: 0)")
    kernels_per_parameter: float = Field(0.0, ge=0, description="kernels per parameter element (fused / foreach "
                                                                "multi-tensor chunks)")
    syncs: float = Field(0.0, ge=0, description="device-to-host syncs per optimizer step (loss.item(), clipping)")


class ImplementationProfile(BaseModel):
    """One framework's (or engine's) implementation (docs/implementation_profiles.md)."""

    model_config = _STRICT

    name: str = Field(description="registry name (the file stem)")
    label: str = Field(description="what it is, in words")
    family: Family = Field(description="megatron | pytorch: the memory and activation accounting rules that apply "
                                       "(Megatron-Core's fused kernels, or what plain PyTorch modules save); serving: "
                                       "an inference engine")
    version: str = Field(description="the framework release the numbers are for")
    base: str | None = Field(None, description="the profile this one inherits unset fields from (resolved)")
    launch: Launch = Field("eager", description="eager | compile | cuda_graphs: the default of training.host_launch "
                                                "(cuda_graphs: no host floor)")
    host: HostCosts = Field(HostCosts(), description="host seconds per kernel, per sync, measured per part")
    kernels: LayerParts = Field(LayerParts(), description="kernels launched per layer part per micro-batch")
    syncs: LayerParts = Field(LayerParts(), description="device-to-host syncs per layer part per micro-batch")
    optimizer: Optimizer = Field(Optimizer(), description="the optimizer step's implementation")
    moe_experts: Literal["grouped_gemm", "per_expert_loop", "te_grouped_linear", "deepgemm"] = Field(
        "grouped_gemm", description="how the MoE experts' GEMMs run")
    attention: str = Field("sdpa_flash", description="the attention kernel this framework calls by default")
    kv_cache: Literal["paged", "concat", "static_expanded"] = Field("paged", description="serving: K/V cache layout")
    serving_kernel_set: str | None = Field(None, description="serving: the kernel set of simulator/serving/"
                                                             "backends.py KERNEL_SETS whose numbers this engine uses")
    training_defaults: dict[str, Any] = Field(
        default_factory=dict, description="defaults of existing training: keys (an explicit scenario key wins)")
    sources: dict[str, str] = Field(description="dotted field path (or section) -> its source, or 'assumed: why'")

    @property
    def megatron_layout(self) -> bool:
        """Megatron-Core's accounting: fused kernels, Megatron DDP buffers, its loss and recompute options."""
        return self.family == "megatron"

    @property
    def pytorch_layout(self) -> bool:
        """Plain PyTorch modules' accounting: what each module saves, autograd gradients, F.cross_entropy."""
        return self.family == "pytorch"

    @property
    def trains(self) -> bool:
        """Whether ``training.framework`` may name it (serving engines may not)."""
        return self.family != "serving"

    @property
    def graphs(self) -> bool:
        """Whether the framework replays captured CUDA graphs by default (no host floor)."""
        return self.launch == "cuda_graphs"

    def layer_host_s(self, moe: bool, local_experts: float) -> tuple[float, float]:
        """(forward, backward) host seconds to issue one layer for one micro-batch (module docstring)."""
        k = self.kernels.layer(moe, local_experts)
        s = self.syncs.layer(moe, local_experts)
        m = self.host.measured_s.layer(moe, local_experts)
        h = self.host
        return tuple(kk * h.per_kernel_s + ss * h.per_sync_s + mm for kk, ss, mm in zip(k, s, m, strict=True))

    def expert_host_s(self) -> tuple[float, float]:
        """(forward, backward) host seconds each local expert adds to a MoE layer."""
        h, k, s, m = self.host, self.kernels, self.syncs, self.host.measured_s
        return (k.per_expert_forward * h.per_kernel_s + s.per_expert_forward * h.per_sync_s + m.per_expert_forward,
                k.per_expert_backward * h.per_kernel_s + s.per_expert_backward * h.per_sync_s + m.per_expert_backward)

    def layer_syncs(self, moe: bool, local_experts: float) -> tuple[float, float]:
        """(forward, backward) device-to-host syncs inside one layer: where the host cannot run ahead."""
        return self.syncs.layer(moe, local_experts)

    def step_host_s(self) -> float:
        """Host seconds per micro-batch outside the layers (embedding, head, loss)."""
        return (self.kernels.per_step * self.host.per_kernel_s + self.syncs.per_step * self.host.per_sync_s
                + self.host.measured_s.per_step)

    def optimizer_host_s(self, tensors: int, parameters: float) -> float:
        """Host seconds to issue one optimizer step over ``tensors`` tensors of ``parameters`` elements in all."""
        o = self.optimizer
        kernels = o.kernels_per_tensor * tensors + o.kernels_per_parameter * parameters
        return kernels * self.host.per_kernel_s + o.syncs * self.host.per_sync_s
