"""The precision recipe: every byte count, dtype and kernel choice that ``training.precision``, ``optimizer``,
``framework``, ``attention`` and the sharding switches imply, resolved once per plan.

This module holds the only precision table of the code (:data:`PRECISIONS`); memory, compute, traffic and the
step engine read the resolved :class:`Recipe` and never the raw strings.

Sources:
- Korthikanti et al. 2023 / Megatron-LM mixed precision: 16-bit params, fp32 main grads (``main_grad``, forced to
  fp32 with bf16: ``accumulate_allreduce_grads_in_fp32``), fp32 main params, two fp32 Adam moments = 18 B/param;
  with fp16 the gradients are reduced in fp16 (docs/memory.md, "Model states").
- Rajbhandari et al. 2020 "ZeRO" Sec. 3: 16-bit params and grads, fp32 params + moments = 16 B/param; DeepSpeed
  ZeRO and PyTorch keep 16-bit gradients with 16-bit params.
- Megatron ``--grad-reduce-in-bf16`` (Megatron-Core ``DistributedDataParallelConfig.grad_reduce_in_fp32=False``,
  NeMo ``optim.grad_sync_dtype: bf16``): the main-gradient buffer is allocated in the parameter dtype (bf16) and
  reduced in it: 2 B/param held and on the wire (``training.grad_reduce_dtype``).
- Megatron ``--fp8-param-gather``: fp8 primary weights replace the 16-bit copy (1 B/param), gathered in fp8.
- NVFP4 training (NVIDIA 2025, "Pretraining Large Language Models with NVFP4", arXiv:2509.25149, Sec. 3-4): the
  linear layers' GEMMs (forward, dgrad, wgrad) take 4-bit E2M1 operands with one E4M3 scale per 16 elements
  (4.5 bits = 0.5625 B per element) on Blackwell tensor cores; weights, master weights, gradients and optimizer
  states are kept as in the bf16 recipe, attention and the output layer stay 16-bit. Serving an NVFP4 checkpoint
  holds 0.5625 B per weight. Without fp4 tensor cores the GEMMs fall back to bf16 (``gemm_dtype_on``).
- PyTorch AMP (``torch.autocast`` over fp32 params): fp32 params, grads and moments, no main copy; DDP gradient
  buckets of the gradient size; autocast casts every weight to bf16 in forward.
- Optimizer step (Megatron ``FusedAdam`` / PyTorch ``foreach`` Adam, one streaming multi-tensor kernel): per owned
  parameter it reads the gradient, reads and writes the master (or the fp32 params), writes the 16-bit model copy,
  reads and writes each moment, plus one gradient read for the gradient norm; the local gradient buffer is zeroed
  for the next step. SGD keeps one momentum buffer (PyTorch ``momentum > 0``); Adafactor's factored second moment is
  O(rows + cols) per matrix and its first moment is off by default, so ~0 per parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.plan.config import ParallelPlan, TrainingConfig

FP32, BF16, FP8 = 4, 2, 1
"""Bytes per element of the dtypes model states, activations and messages use."""
FP4 = 0.5 + 1 / 16
"""NVFP4 bytes per element: a 4-bit E2M1 value plus one 8-bit E4M3 scale per 16 elements (arXiv:2509.25149)."""

#: HBM bytes per parameter of one separate fp32 gradient-accumulation pass (DeepSpeed BF16_Optimizer
#: ``update_hp_grads``: ``hp_grad.add_(lp.grad.to(fp32))``): the cast reads the 16-bit gradient and writes an fp32
#: temporary, the add reads it and the fp32 accumulator and writes the accumulator back
SEPARATE_FP32_ACCUMULATION_BYTES = BF16 + FP32 + FP32 + FP32 + FP32


@dataclass(frozen=True, slots=True)
class PrecisionRow:
    """One row of the precision table: what a ``training.precision`` value means before framework and sharding.

    Attributes:
        param: bytes of the weight copy the GEMMs read (16-bit, fp8 primary weights, or fp32).
        main: bytes of the fp32 master copy (0 when the params themselves are fp32 or the recipe has none).
        grad_megatron: gradient bytes Megatron holds (``main_grad``) with its own DDP (zero 0).
        grad_zero: gradient bytes DeepSpeed ZeRO / PyTorch hold.
        grad_wire_megatron: bytes per gradient element Megatron reduces (fp16 reduces 16-bit grads).
        moment: bytes per optimizer moment element.
        activation: bytes per activation element (memory and messages; fp8 GEMM inputs are cast per GEMM).
        gemm: tensor-core dtype of the GEMMs (fp8 falls back to bf16 on GPUs without fp8 tensor cores).
        serve_param: weight and activation element bytes when serving (no master copy).
        ddp_bucket: PyTorch DDP keeps gradient buckets of this many bytes per parameter (fp32 grads).
    """

    param: int
    main: int
    grad_megatron: int
    grad_zero: int
    grad_wire_megatron: int
    moment: int
    activation: int
    gemm: str
    serve_param: float
    ddp_bucket: int


PRECISIONS: dict[str, PrecisionRow] = {
    "bf16": PrecisionRow(BF16, FP32, FP32, BF16, FP32, FP32, BF16, "bf16", BF16, 0),
    "fp16": PrecisionRow(BF16, FP32, FP32, BF16, BF16, FP32, BF16, "fp16", BF16, 0),
    "fp8": PrecisionRow(FP8, FP32, FP32, BF16, FP32, FP32, BF16, "fp8", FP8, 0),
    "fp4": PrecisionRow(BF16, FP32, FP32, BF16, FP32, FP32, BF16, "fp4", FP4, 0),
    "amp_bf16": PrecisionRow(FP32, 0, FP32, FP32, FP32, FP32, BF16, "bf16", BF16, FP32),
    "fp32": PrecisionRow(FP32, 0, FP32, FP32, FP32, FP32, FP32, "fp32", FP32, FP32),
    "pure_bf16": PrecisionRow(BF16, 0, BF16, BF16, BF16, BF16, BF16, "bf16", BF16, 0),
}
"""The precision table (module docstring for the sources)."""

MOMENTS: dict[str, int] = {"adam": 2, "sgd": 1, "adafactor": 0}
"""Optimizer state elements per parameter: Adam m and v; SGD momentum; Adafactor ~0 (factored)."""

MOMENT_BYTES: dict[str, int] = {"fp32": FP32, "bf16": BF16, "fp16": BF16, "fp8": FP8}
"""``training.exp_avg_dtype`` / ``exp_avg_sq_dtype`` element bytes (Megatron --exp-avg-dtype choices)."""
PARAM_REMAINDER_BYTES = BF16
"""Megatron ``store_param_remainders``: the master copy's int16 low halves beside bf16 weights
(megatron/core/optimizer/distrib_optimizer.py: ``init_shard(torch.int16)`` for ``master_param``)."""

KV_CACHE_BYTES: dict[str, int] = {"bf16": BF16, "fp16": BF16, "fp8": FP8}
"""``training.kv_cache_dtype`` element bytes."""

_CONVENTIONS = {"amp_bf16": "PyTorch AMP (fp32 params)", "fp32": "fp32", "pure_bf16": "pure bf16"}


def sharding_stage(plan: ParallelPlan) -> int:
    """0 DDP; 1 optimizer states (ZeRO-1, distributed optimizer, Megatron-FSDP ``optim``); 2 + gradients
    (``optim_grads``); 3 + parameters (``optim_grads_params``, ZeRO-3, FSDP)."""
    if plan.megatron_fsdp is not None:
        return {"optim": 1, "optim_grads": 2, "optim_grads_params": 3}[plan.megatron_fsdp]
    if plan.distributed_optimizer:
        return 1
    return plan.zero


@dataclass(frozen=True, slots=True)
class Recipe:
    """What a plan's precision, optimizer, framework and sharding imply, resolved once (module docstring).

    Bytes are per parameter or per element, unsharded; :meth:`per_param` applies the sharding stage.

    Attributes:
        precision, optimizer: the raw settings (labels only: consumers read the fields below).
        convention: name of the bookkeeping convention (reports).
        stage: sharding stage 0-3 (:func:`sharding_stage`).
        param, grad, main, moments, bucket: bytes per parameter held as weights, gradients, fp32 master copy,
            optimizer moments (all of them) and DDP gradient buckets.
        moment_count: optimizer moments per parameter.
        grad_wire: bytes per gradient element the data-parallel reduction moves.
        param_wire: bytes per parameter the ZeRO / distributed-optimizer all-gather moves.
        weight_compute: bytes of a weight as the GEMMs read it (ZeRO-3 / FSDP gathered layers).
        activation: bytes per activation element (memory and messages).
        gemm_dtype: tensor dtype of the GEMMs before the GPU fallback (:meth:`gemm_dtype_on`): ``fp8`` for
            tensor-wise scaled fp8, ``fp8_block`` for block-wise scaled fp8 (MXFP8-like on Blackwell, whose tensor
            cores apply the block scales), ``fp4`` for NVFP4.
        fp8_cast_bytes: extra HBM bytes per element of (linear input, output gradient) the fp8 recipe quantizes per
            micro-batch; both operands also need an fp8 transpose for the dgrad / wgrad GEMMs. Megatron with
            Transformer Engine fuses the casts into the kernels that produce the tensors (LayerNormLinear,
            LayerNormMLP, the activation and bias-gradient kernels write fp8 in place of bf16 plus the transposed
            fp8 copy): (1, 2) extra bytes, the transpose written beside a narrower output and the gradient's fp8
            copy and transpose. Plain PyTorch (torchao float8) runs separate cast kernels: read 2, write 1 + 1 =
            (4, 4). (0, 0) without fp8.
        attention: the attention kernel compute times: ``flash`` (the architecture's fused kernel), ``flash2``
            (the FlashAttention-2 package, ``training.attention_kernel``), ``unfused`` (s x s scores) or ``sdpa``
            (PyTorch's F.scaled_dot_product_attention, flash backend, measured rate).
        eager: plain PyTorch modules: layout copies, DDP always overlapping.
        grads_freed_between_steps: gradient tensors do not exist between optimizer steps (PyTorch
            ``zero_grad(set_to_none=True)``); Megatron's contiguous gradient buffer always exists.
        amp_casts: torch.autocast over fp32 weights: fp32 residual stream, casts, bf16 weight copies. Not with
            FSDP2 (ZeRO-3): its mixed-precision policy gathers bf16 parameters and the layers compute in bf16
            (torchtitan enables autocast only without FSDP), as the memory model's bf16 gathered layers say.
        serve_param: weight (and transient activation) element bytes when serving.
        kv_cache: KV-cache element bytes when serving (default: ``serve_param``).
        moe_dispatch_dtype: default MoE dispatch payload (fp8 with the fp8 recipe, DeepEP; combine stays bf16).
        grad_accum_bytes: HBM bytes per parameter each micro-batch's backward spends adding its weight gradients
            into the fp32 accumulator outside the GEMMs (``training.grad_accumulation``: 0 when fused into the
            weight-gradient GEMM, :data:`SEPARATE_FP32_ACCUMULATION_BYTES` for a separate pass).
        fsdp_copy_bytes: PyTorch FSDP2 (``framework: pytorch``, ZeRO-3) copies every parameter out of the
            all-gather buffer into the unsharded parameters (``split_with_sizes_copy``: read and write
            ``param_wire`` bytes) after the forward gather and after the backward re-gather (reshard after forward,
            FSDP2's default), and copies the unsharded gradients into the reduce-scatter buffer in the reduce dtype
            (``torch._chunk_cat`` in ``foreach_reduce``: read the compute-dtype gradient, write ``grad_wire`` bytes)
            each micro-batch: (2 w, 2 w + w + g) bytes per parameter forward and backward, w = ``param_wire``, g =
            ``grad_wire`` (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). (0, 0) otherwise.
        cross_entropy: the loss chain, ``training.cross_entropy`` with Megatron (``fused`` or ``unfused``), ``pytorch``
            (``F.cross_entropy`` on fp32 logits) with plain PyTorch: its bytes per logit in
            :data:`simulator.program.op_chains.CROSS_ENTROPY_BYTES`, and the unfused chain's second fp32 logits copy
            in memory.
        loss_implementation: ``training.loss_implementation`` (plain PyTorch only): which tensors the loss keeps on
            the logits (memory; the loss's time is ``cross_entropy``'s).
        grads_per_layer: gradients freed between steps appear layer by layer in backward
            (``training.gradient_lifetime: per_layer``), so the stage peak is taken over the phases of backward.
        act_input_fp8: the SwiGLU input is saved for backward in fp8 (``training.activation_func_fp8_input_store``).
    """

    precision: str
    optimizer: str
    convention: str
    stage: int
    param: float
    grad: float
    main: float
    moments: float
    bucket: float
    moment_count: int
    grad_wire: int
    param_wire: int
    weight_compute: int
    activation: int
    gemm_dtype: str
    fp8_cast_bytes: tuple[float, float]
    attention: Literal["flash", "flash2", "unfused", "sdpa"]
    eager: bool
    grads_freed_between_steps: bool
    amp_casts: bool
    serve_param: float
    kv_cache: float
    moe_dispatch_dtype: str
    grad_accum_bytes: float = 0.0
    cross_entropy: str = "fused"
    fsdp_copy_bytes: tuple[float, float] = (0.0, 0.0)
    loss_implementation: str | None = None
    grads_per_layer: bool = False
    act_input_fp8: bool = False

    def per_param(self, d: int) -> float:
        """Bytes per parameter on one GPU when states are sharded over ``d`` ranks at ``self.stage`` (DDP gradient
        buckets only exist with more than one replica)."""
        return (self.param / (d if self.stage >= 3 else 1) + self.grad / (d if self.stage >= 2 else 1)
                + (self.main + self.moments) / (d if self.stage >= 1 else 1) + (self.bucket if d > 1 else 0.0))

    @property
    def megatron_vocab_padding(self) -> bool:
        """Megatron (every framework but plain PyTorch) pads the vocabulary to a multiple of 128 x tp."""
        return not self.eager

    def gemm_dtype_on(self, gpu_dtypes) -> str:
        """The GEMM dtype on a GPU with tensor cores for ``gpu_dtypes`` (fp8 falls back to bf16 without them)."""
        return self.gemm_dtype if self.gemm_dtype.split("_")[0] in gpu_dtypes else "bf16"

    @property
    def optimizer_update_bytes(self) -> float:
        """HBM bytes per owned parameter of one optimizer step: gradient read, master (or fp32 param) read and
        write, 16-bit copy write when there is a master, each moment read and written, and the gradient-norm
        read."""
        master = 2 * (self.main if self.main else self.param)
        copy = self.param if self.main else 0.0
        return self.grad + master + copy + 2 * self.moments + self.grad


#: element bytes of the quantized GEMM operands of each low-precision GEMM dtype
QUANTIZED_BYTES = {"fp8": FP8, "fp4": FP4}


def _cast_bytes(gemm: str, eager: bool) -> tuple[float, float]:
    """Extra HBM bytes per element of (input, output gradient) the quantized recipes cast per micro-batch."""
    q = QUANTIZED_BYTES.get(gemm)
    if q is None:
        return (0.0, 0.0)
    unfused = BF16 + 2 * q
    return (unfused, unfused) if eager else (q, 2 * q)


def _moment_bytes(training: TrainingConfig, default: int) -> float:
    """Optimizer-state bytes per parameter: each moment in the recipe's dtype, or Adam's first and second moments
    in ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` (Megatron --use-precision-aware-optimizer, megatron/training/
    arguments.py and core/optimizer/__init__.py at d98e8a64: passed to Transformer Engine's FusedAdam)."""
    if training.optimizer == "adam" and (training.exp_avg_dtype or training.exp_avg_sq_dtype):
        return sum(MOMENT_BYTES[dt] if dt else default for dt in (training.exp_avg_dtype, training.exp_avg_sq_dtype))
    return MOMENTS[training.optimizer] * default


def resolve_recipe(plan: ParallelPlan, training: TrainingConfig) -> Recipe:
    """The :class:`Recipe` of a plan (module docstring for the rules)."""
    row = PRECISIONS[training.precision]
    stage = sharding_stage(plan)
    megatron = training.family == "megatron"
    megatron_ddp = megatron and plan.zero == 0
    mixed = row.main > 0
    grad = row.grad_megatron if megatron_ddp else row.grad_zero
    grad_wire = row.grad_wire_megatron if megatron_ddp else grad
    if megatron_ddp and training.grad_reduce_dtype is not None and mixed:
        grad = grad_wire = {"fp32": FP32, "bf16": BF16}[training.grad_reduce_dtype]
    if mixed:
        convention = "Megatron mixed precision" if megatron_ddp else "ZeRO mixed precision"
    else:
        convention = _CONVENTIONS[training.precision]
    bucket = row.ddp_bucket if training.family == "pytorch" and stage == 0 else 0.0
    # the weight copy is gathered as held (fp8 primary weights in fp8: --fp8-param-gather), except that ZeRO-3 /
    # FSDP gathers fp32 params of AMP in the compute dtype (FSDP mixed precision ``param_dtype``)
    param_wire = BF16 if stage >= 3 and training.precision == "amp_bf16" else row.param
    eager = training.family == "pytorch"
    attention = training.attention
    if attention == "flash":
        attention = "sdpa" if eager else ("flash2" if training.attention_kernel == "flash2" else "flash")
    return Recipe(
        precision=training.precision, optimizer=training.optimizer, convention=convention, stage=stage,
        param=row.param, grad=grad, main=PARAM_REMAINDER_BYTES if training.store_param_remainders else row.main,
        moments=_moment_bytes(training, row.moment), bucket=bucket,
        moment_count=MOMENTS[training.optimizer], grad_wire=grad_wire, param_wire=param_wire,
        weight_compute={"fp32": FP32, "fp8": FP8}.get(row.gemm, BF16), activation=row.activation,
        gemm_dtype="fp8_block" if row.gemm == "fp8" and training.fp8_recipe == "blockwise" else row.gemm,
        fp8_cast_bytes=_cast_bytes(row.gemm, eager), attention=attention, eager=eager,
        grads_freed_between_steps=eager and training.grad_set_to_none,
        amp_casts=eager and training.precision == "amp_bf16" and stage < 3,
        serve_param=row.serve_param,
        kv_cache=KV_CACHE_BYTES[training.kv_cache_dtype] if training.kv_cache_dtype else row.activation,
        moe_dispatch_dtype="fp8" if row.gemm in QUANTIZED_BYTES else "bf16",
        grad_accum_bytes=SEPARATE_FP32_ACCUMULATION_BYTES if training.grad_accumulation == "separate_fp32" else 0.0,
        cross_entropy="pytorch" if eager else (training.cross_entropy or "fused"),
        fsdp_copy_bytes=(2.0 * param_wire, 3.0 * param_wire + grad_wire) if eager and stage >= 3 else (0.0, 0.0),
        loss_implementation=training.loss_implementation,
        grads_per_layer=eager and training.grad_set_to_none and training.gradient_lifetime == "per_layer",
        act_input_fp8=training.activation_func_fp8_input_store)
