"""The ``parallel:`` and ``training:`` sections of a scenario (docs/interface.md), as strict frozen pydantic models.

Field names are exactly docs/interface.md's so the scenario loader passes the YAML dicts straight in. Cross-field rules
live in :mod:`simulator.plan.resolve`, in one place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from simulator.implementation.profiles import Profile, profile_named
from simulator.plan.schedules import ONE_F_ONE_B, ScheduleName

_STRICT = ConfigDict(extra="forbid", frozen=True)

Recompute = Literal["none", "selective", "full"]
RecomputeModule = Literal["core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj"]
"""Megatron-LM ``--recompute-modules`` (with ``--recompute-granularity selective``; default ``core_attn``)."""
Precision = Literal["bf16", "fp16", "amp_bf16", "pure_bf16", "fp8", "fp4", "fp32"]


class ParallelPlan(BaseModel):
    """How ranks split the model and the data (docs/interface.md ``parallel:``)."""

    model_config = _STRICT

    tp: int = Field(1, ge=1, description="tensor parallel size")
    pp: int = Field(1, ge=1, description="pipeline parallel size (stages)")
    dp: int | None = Field(None, ge=1, description="data parallel size; null = derived from the GPU count")
    cp: int = Field(1, ge=1, description="context parallel size (ring attention, head-tail chunks)")
    ep: int = Field(1, ge=1, description="expert parallel size")
    vpp: int = Field(1, ge=1, description="virtual pipeline stages per rank (interleaved 1F1B when > 1)")
    sp: bool = Field(False, description="Megatron sequence parallelism (needs tp > 1)")
    ulysses: int = Field(1, ge=1, description="DeepSpeed-Ulysses all-to-all sequence parallel size")
    zero: Literal[0, 1, 2, 3] = Field(0, description="ZeRO / FSDP stage, sharding over dp*cp*ulysses")
    distributed_optimizer: bool = Field(False, description="Megatron distributed optimizer")
    megatron_fsdp: Literal["optim", "optim_grads", "optim_grads_params"] | None = Field(
        None, description="Megatron-FSDP sharding strategy (needs distributed_optimizer)")
    etp: int = Field(1, ge=1, description="expert tensor parallel size; expert data parallel is derived")
    redundant_experts: int = Field(
        0, ge=0, le=4096, description="EPLB: extra replicas of the busiest experts, (experts + R) / ep slots per EP "
                                      "rank placed to balance the ranks' load (deepseek-ai/EPLB; vLLM "
                                      "--num-redundant-experts, SGLang --ep-num-redundant-experts); docs/moe.md")
    order: str = Field("tp-cp-ep-dp-pp", description="rank order, fastest-varying first (Megatron default)")
    schedule: ScheduleName = Field(
        ONE_F_ONE_B.name, description="pipeline schedule: 1f1b (interleaved when vpp > 1), gpipe, DeepSeek's "
                                      "bidirectional dualpipe (two copies of the model) / dualpipev (V-shaped, two "
                                      "chunks per rank), or the zero-bubble zb1p (ZB-H1: 1F1B with deferred weight "
                                      "gradients) / zbv (ZB-V: V-shaped, two chunks per rank)")
    recompute: Recompute = Field("none", description="activation recomputation")
    recompute_layers: int | None = Field(
        None, ge=1, description="with recompute full: the first N layers of every model chunk are recomputed, the "
                                "others keep their activations (Megatron --recompute-method block "
                                "--recompute-num-layers N); null = every layer")
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="with recompute selective: the modules re-run in backward, as Megatron-LM "
                          "--recompute-modules (core_attn, layernorm, mlp, moe, moe_act, shared_experts, "
                          "mla_up_proj); null = [core_attn] (Megatron's default)")
    cpu_offloading_num_layers: int = Field(
        0, ge=0, description="Megatron --cpu-offloading-num-layers (Transformer Engine CPU offload of the saved "
                             "activations): the first N layers' activations go to host memory after their forward "
                             "and come back before their backward, so L - N layers' stay on the GPU (needs pp 1, "
                             "recompute none, N < layers, as Megatron-Core's TransformerConfig checks); the copies "
                             "over the host link are priced against each layer's compute (docs/offload.md)")
    optimizer_cpu_offload: bool = Field(
        False, description="optimizer states and fp32 master weights in host memory, the optimizer step on the CPU: "
                           "Megatron --optimizer-cpu-offload (needs distributed_optimizer), DeepSpeed ZeRO-Offload "
                           "offload_optimizer.device cpu or FSDP2 CPUOffloadPolicy (framework pytorch, zero >= 1); "
                           "docs/offload.md")
    optimizer_offload_fraction: float = Field(
        1.0, ge=0.0, le=1.0, description="Megatron --optimizer-offload-fraction: share of the owned optimizer "
                                         "states offloaded (the rest stays on the GPU, stepped there)")
    overlap_cpu_optimizer_d2h_h2d: bool = Field(
        False, description="Megatron --overlap-cpu-optimizer-d2h-h2d: gradient copy to the host, CPU step and "
                           "parameter copy back pipelined over parameter groups (the slowest of the three "
                           "instead of their sum)")
    offload_param: Literal["none", "cpu", "nvme"] = Field(
        "none", description="ZeRO-Infinity offload_param.device: the owned parameter shard lives in host memory "
                            "or on the node's NVMe drives and is fetched before each gather (needs zero 3 and "
                            "optimizer_cpu_offload)")
    selective_ac_option: Literal["op"] | None = Field(
        None, description="with recompute selective: op = torchtitan's per-op selective activation checkpointing "
                          "(activation_checkpoint.mode selective, selective_ac_option op: the outputs of matmuls "
                          "(every second one recomputed), SDPA and collectives saved, the rest recomputed; "
                          "framework pytorch, dense layers without MLA, tp 1, cp 1); null = Megatron's "
                          "recompute_modules")
    overlap_grad_reduce: bool = Field(False, description="overlap DP gradient reduction with backward")
    overlap_param_gather: bool = Field(False, description="overlap DP parameter all-gather with forward")
    tp_comm_overlap: bool = Field(False, description="overlap TP communication with GEMMs")
    pipeline_layers: tuple[int, ...] | None = Field(
        None, description="explicit layers per virtual stage (pp*vpp entries, Megatron chunk order); "
                          "null = layers / (pp*vpp) each")
    cp_comm: Literal["p2p", "all_gather"] = Field("p2p", description="CP K/V exchange: ring P2P or all-gather")
    deallocate_pipeline_outputs: bool = Field(
        True, description="Megatron deallocate_output_tensor (megatron/core/pipeline_parallel/schedules.py): a stage's "
                          "output is freed once sent to the next stage, only its autograd node kept (set by "
                          "Megatron-LM's training loop, megatron/training/argument_utils.py; ModelParallelConfig "
                          "defaults it to false for library callers). false: every micro-batch in flight keeps its "
                          "stage output, 2 B x s*b*h/(cp, t with sp), until its backward")

    @property
    def recomputed_modules(self) -> frozenset[str]:
        """What selective recompute re-runs (``recompute_modules``, default core attention); empty otherwise (full
        recompute re-runs the whole layer)."""
        if self.recompute != "selective":
            return frozenset()
        if self.selective_ac_option == "op":      # torchtitan's per-op policy (simulator/program/op_sac.py)
            return frozenset({"op_sac"})
        return frozenset(self.recompute_modules or ("core_attn",))


class TrainingConfig(BaseModel):
    """Batch, precision recipe, optimizer and framework (docs/interface.md ``training:``)."""

    model_config = _STRICT

    seq_len: int = Field(2048, ge=1, description="tokens per sequence")
    micro_batch: int = Field(1, ge=1, description="sequences per micro-batch per DP rank")
    global_batch: int = Field(64, ge=1, description="sequences per optimizer step")
    precision: Precision = Field("bf16", description="precision recipe (docs/memory.md lists bytes per parameter)")
    optimizer: Literal["adam", "sgd", "adafactor"] = Field("adam", description="optimizer (sets state bytes)")
    framework: str = Field("megatron", description="implementation profile (simulator/implementation/frameworks: "
                                                   "megatron, pytorch, megatron_core_te, nemo, torchtitan, deepspeed, "
                                                   "hf_transformers, hf_trainer, vllm, sglang, tensorrt_llm, ...): "
                                                   "the accounting family, kernels, host costs and defaults")
    #: set by the loader, never written by a user (the scenario's top-level `implementation:` section), so left out
    #: of `simulator schema`'s JSON Schema; a `training.implementation` key is refused (scenario/profile_section.py)
    implementation: SkipJsonSchema[Profile | None] = Field(
        None, description="the resolved profile when the scenario gives `implementation:` (a profile file or "
                          "field overrides); null: the shipped profile `framework` names")
    attention: Literal["flash", "unfused"] = Field(
        "flash", description="attention kernel: flash keeps O(s) statistics, unfused keeps the s x s scores")
    attention_kernel: Literal["fused", "flash2"] = Field(
        "fused", description="attention flash: the kernel that runs it. fused: the architecture's fused attention "
                             "(Transformer Engine's cuDNN / FlashAttention-3 on Hopper, FlashAttention-2 on Ampere) "
                             "at ComputeEfficiency.attention_efficiency; flash2: the FlashAttention-2 package (e.g. "
                             "Megatron --use-flash-attn with flash-attn 2) at flash2_efficiency (measured on H200)")
    mode: Literal["train", "inference"] = Field(
        "train", description="train: a training step; inference: serving memory (weights + KV cache of micro_batch "
                             "sequences of seq_len tokens per replica)")
    fp8_recipe: Literal["tensorwise", "blockwise"] = Field(
        "tensorwise", description="precision fp8: tensorwise (one scale per tensor: Transformer Engine delayed or "
                                  "current scaling) or blockwise (1x128 activation, 128x128 weight scales, as "
                                  "DeepSeek-V3)")
    grad_set_to_none: bool = Field(
        True, description="framework pytorch: optimizer.zero_grad(set_to_none=...); false keeps the gradient "
                          "tensors alive between steps")
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="framework megatron: dtype of the main-gradient buffer and of the data-parallel gradient "
                          "reduction (Megatron --grad-reduce-in-bf16 / DDP grad_reduce_in_fp32, NeMo "
                          "optim.grad_sync_dtype); null = the framework default (fp32 with bf16/fp8, fp16's own "
                          "16-bit reduction)")
    grad_accumulation: Literal["fused", "separate_fp32"] = Field(
        "fused", description="framework megatron: how each micro-batch's weight gradients reach the fp32 "
                             "accumulation buffer. fused: the weight-gradient GEMM accumulates into it in its "
                             "epilogue (Megatron --gradient-accumulation-fusion); separate_fp32: a pass over the "
                             "stage's gradients after every micro-batch's backward, cast to fp32 and added (DeepSpeed "
                             "BF16_Optimizer.update_hp_grads): 18 B of HBM traffic per parameter per micro-batch")
    cross_entropy: Literal["fused", "unfused"] | None = Field(
        None, description="framework megatron: the vocabulary cross entropy (null = fused): fused (one pass over "
                             "the logits forward and one backward: Megatron --cross-entropy-loss-fusion, NeMo / Megatron-Bridge recipes) or "
                             "unfused (Megatron's default op chain on logits.float(): cast, max, subtract, exp, "
                             "sum, divide; 52.9 + 17.4 copy-equivalent bytes per logit measured on H200, and a "
                             "second fp32 copy of the logits alive during the loss). Plain PyTorch's "
                             "F.cross_entropy is priced as measured (28.0 + 27.1 B per logit)")
    host_launch: Literal["eager", "cuda_graphs"] = Field(
        "eager", description="how the framework issues kernels: eager (from Python each micro-batch: a layer takes "
                             "at least the host time to issue its kernels, measured in docs/step_time.md 'Host "
                             "issue time') or cuda_graphs (captured layers replayed: no host floor)")
    gradient_lifetime: Literal["endpoints", "per_layer"] = Field(
        "endpoints", description="framework pytorch with grad_set_to_none and one micro-batch: when the gradients "
                                 "exist. endpoints: the peak is the larger of the activations at the start of "
                                 "backward and all gradients at its end, transients on top of both; per_layer: "
                                 "autograd's AccumulateGrad creates each parameter's .grad when its layer's backward "
                                 "runs, so the peak is the largest of the loss (every activation and the loss "
                                 "buffers, no gradient), each layer's backward (the activations below it, the "
                                 "gradients above it, its own recomputed activations) and the end of backward")
    loss_implementation: Literal["hf_fp32"] | None = Field(
        None, description="framework pytorch: what the loss keeps on the logits (null: F.cross_entropy on "
                          "logits.float() with the 16-bit logits held through backward). hf_fp32: Hugging Face "
                          "Transformers ForCausalLMLoss (src/transformers/loss/loss_utils.py): logits.float(), then "
                          "F.cross_entropy; the 16-bit logits die with the model output before backward, the fp32 "
                          "log-softmax output is saved, and backward holds it with nll_loss's fp32 gradient and "
                          "log_softmax_backward's fp32 gradient of the logits: 12 B per token and vocabulary entry")
    exp_avg_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = Field(
        None, description="optimizer adam: storage dtype of the first moment (Megatron --use-precision-aware-optimizer "
                          "--exp-avg-dtype, Transformer Engine FusedAdam exp_avg_dtype; a low-precision AdamW in "
                          "plain PyTorch); null = the precision recipe's moment dtype")
    exp_avg_sq_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = Field(
        None, description="optimizer adam: storage dtype of the second moment (Megatron --exp-avg-sq-dtype); null = "
                          "the precision recipe's moment dtype")
    store_param_remainders: bool = Field(
        False, description="framework megatron, precision bf16, with the precision-aware optimizer (exp_avg_dtype "
                           "and exp_avg_sq_dtype set): the fp32 master copy keeps only the 16 bits a bf16 weight "
                           "lacks (Megatron OptimizerConfig.store_param_remainders, default true there with "
                           "Transformer Engine >= 2.1): 2 B per parameter instead of 4")
    activation_func_fp8_input_store: bool = Field(
        False, description="framework megatron, SwiGLU models: Megatron --activation-func-fp8-input-store (the fused "
                           "bias-SwiGLU saves its input, gate and up, as float8_e4m3fn for backward and casts it "
                           "back there: 1 B per element instead of 2, in dense MLPs, MoE experts and shared experts)")
    kv_cache_dtype: Literal["bf16", "fp16", "fp8"] | None = Field(
        None, description="KV cache element type in inference (default: the activation dtype)")

    @field_validator("framework")
    @classmethod
    def _known_framework(cls, value: str) -> str:
        profile_named(value)            # an unknown name lists the shipped profiles
        return value

    @property
    def profile(self) -> Profile:
        """The implementation profile this training runs (:mod:`simulator.implementation.profiles`)."""
        return self.implementation if self.implementation is not None else profile_named(self.framework)

    @property
    def family(self) -> str:
        """The profile's accounting family: ``megatron`` or ``pytorch``."""
        return self.profile.family
