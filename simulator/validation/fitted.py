"""The registry of fitted constants: every number the step-time model reads that was fitted to, or chosen from,
data, with what it was fitted on (issue 28 item 5).

Leave-one-source-out validation (:mod:`simulator.validation.cv`) re-fits, for each source of the development set
(``data/published_runs/runs.csv``, grouped by :func:`simulator.validation.cv.source_family`), every constant
fitted on published runs of the development set on the other sources' runs only. A constant fitted on anything
else (a published table outside the development set, a published kernel benchmark, a measurement on this
project's H200) is the same in every fold: its ``fitted_on`` is empty and it has no ``refit``.

Audit (2026-12-04, main at 61e3044): ``grep -rniE "fitted|calibrat|least.squares"`` over ``simulator/`` and
``docs/``, the run ids and source names of the development set over ``simulator/``, ``benchmarks/`` and
``hardware_profiles/``, the git history of ``compute_efficiency.yaml``, ``overlap.yaml``, ``compute/host.py`` and
``moe/coefficients.py``. Every constant below was fitted outside the development set; none is fitted on its
runs, so the registry has no ``refit`` and leave-one-source-out equals in-sample. What the audit cannot re-fit:
modelling choices made while the development set was in view (docs/validation_cv.md).
A new constant fitted on published runs of the development set is registered here with its ``fitted_on`` families,
a ``refit`` from a subset of :class:`~simulator.validation.cv.CvRun` and an override path in ``cv.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS
from simulator.compute.efficiency import default_efficiency
from simulator.implementation.profiles import profile_named
from simulator.memory.nccl import COMM_EXTRA_BYTES, PROCESS_BYTES
from simulator.memory.runtime import ALLOCATOR_CACHE_BYTES, RUNTIME_BYTES
from simulator.moe.coefficients import DEFAULT_MOE_COEFFICIENTS as MOE
from simulator.pricing.offload import offload_coefficients
from simulator.pricing.overlap import coefficients as overlap_coefficients
from simulator.program.op_chains import (
    CROSS_ENTROPY_BYTES,
    EAGER_CHAINS,
    HF_EXPERT_CHAINS,
    PERMUTE_CHAINS,
    SEQUENTIAL_ASSEMBLY,
)
from simulator.serving.backends import (
    ATTENTION_KERNELS,
    HF_COMPILED_STEP_HOST_S,
    HF_EAGER_HOST_LAUNCH_S,
    SDPA_CALLS,
    TORCH_EAGER_CHAINS,
)

KORTHIKANTI = "published, outside the development set"
KERNEL = "published kernel or NCCL benchmark"


def _hf():
    return profile_named("hf_transformers")
H200 = "measured on this project's H200"


@dataclass(frozen=True)
class FittedConstant:
    """One fitted constant: its name where it lives, what it is, how to read its shipped value, what it was fitted
    on, the development set's source families among that data (empty: fixed in every fold) and the function that
    re-fits it from a subset of runs (None when ``fitted_on`` is empty)."""

    name: str
    what: str
    read: Callable[[], object]
    kind: str
    data: str
    fitted_on: tuple[str, ...] = ()
    refit: Callable[[Sequence], float] | None = None

    def __post_init__(self) -> None:
        if bool(self.fitted_on) != (self.refit is not None):
            raise ValueError(f"fitted constant {self.name}: fitted_on {self.fitted_on} needs a refit and only then")


def _hopper():
    return default_efficiency("hopper")


def _ampere():
    return default_efficiency("ampere")


_T4 = "Korthikanti et al. 2023 Table 4 (one 22B layer forward/backward, 10 numbers, least squares on log time)"
FITTED_CONSTANTS: tuple[FittedConstant, ...] = (
    FittedConstant("pricing/data/offload.yaml cpu_optimizer_efficiency",
                   "CPU optimizer step of offload, fraction of the node's DRAM peak",
                   lambda: offload_coefficients()["cpu_optimizer_efficiency"], KORTHIKANTI,
                   "DeepSpeed ZeRO-Offload Qwen2.5-1.5B on a DGX A100 (deepspeedai/DeepSpeed blogs/zenflow-corebinding; "
                   "the 3B row validates), validation/data/deepspeed_offload.csv"),
    FittedConstant("compute_efficiency.yaml ampere.peak_fraction.bf16/fp16", "A100 GEMM fraction of peak",
                   lambda: _ampere().peak_fraction["bf16"], KORTHIKANTI, _T4),
    FittedConstant("compute_efficiency.yaml ampere.memory_efficiency", "A100 fraction of HBM bandwidth",
                   lambda: _ampere().memory_efficiency, KORTHIKANTI, _T4),
    FittedConstant("overlap.yaml overlap_interference", "share of a hidden NVLink collective that slows compute",
                   lambda: overlap_coefficients()["overlap_interference"], KORTHIKANTI, _T4),
    FittedConstant("compute_efficiency.yaml hopper.peak_fraction.bf16/fp16", "H100/H200 GEMM fraction of peak",
                   lambda: (_hopper().peak_fraction["bf16"], _hopper().peak_fraction["fp16"]), H200,
                   "132 GEMMs, validation/data/h200x2_kit/gemm.csv"),
    FittedConstant("compute_efficiency.yaml hopper tiles, k_overhead, launch_s, memory_efficiency",
                   "GEMM shape terms (all architectures)",
                   lambda: (_hopper().tiles[2].efficiency, _hopper().k_overhead, _hopper().launch_s,
                            _hopper().memory_efficiency), H200, "validation/data/h200x2_kit/gemm.csv"),
    FittedConstant("compute_efficiency.yaml hopper.peak_fraction.fp8/fp8_block", "FP8 GEMM fraction of FP8 peak",
                   lambda: (_hopper().peak_fraction["fp8"], _hopper().peak_fraction["fp8_block"]), H200,
                   "271 torch._scaled_mm GEMMs each, validation/data/h200_fp8"),
    FittedConstant("compute_efficiency.yaml hopper.grouped_efficiency", "grouped expert GEMM vs dense GEMM",
                   lambda: dict(_hopper().grouped_efficiency), H200, "104 configurations each, validation/data/h200_moe"),
    FittedConstant("compute_efficiency.yaml hopper.flash2_efficiency", "FlashAttention-2 fwd+bwd fraction of peak",
                   lambda: _hopper().flash2_efficiency, H200, "7 causal shapes, validation/data/h200_attention"),
    FittedConstant("compute_efficiency.yaml hopper.sdpa_by_head_dim, sdpa_half_seq, sdpa_fwd",
                   "PyTorch SDPA rate by head dim and sequence",
                   lambda: (dict(_hopper().sdpa_by_head_dim), _hopper().sdpa_half_seq, tuple(_hopper().sdpa_fwd)),
                   H200, "validation/data/h200_sdpa, h200_serve/ops.jsonl"),
    FittedConstant("compute_efficiency.yaml *.attention_efficiency", "fused attention fwd+bwd fraction of peak",
                   lambda: _hopper().attention_efficiency, KERNEL,
                   "FlashAttention-3 paper Fig. 5/6 and FlashAttention-2 Fig. 4, read between"),
    FittedConstant("implementation/frameworks/megatron.yaml measured_host", "host issue time of an eager MoE layer (s)",
                   lambda: tuple(profile_named("megatron").measured_host.model_dump().values()), H200,
                   "9 cases, validation/data/h200_host/moe_host.jsonl"),
    FittedConstant("program/op_chains.py PERMUTE_CHAINS, SEQUENTIAL_ASSEMBLY", "MoE permute chains (copy bytes)",
                   lambda: (tuple(PERMUTE_CHAINS), SEQUENTIAL_ASSEMBLY.bwd_per_expert), H200,
                   "7 shapes, validation/data/h200_moe_chains/moe_dispatch_paths.jsonl"),
    FittedConstant("implementation/frameworks/hf_transformers.yaml host, optimizer.bandwidth_fraction",
                   "HF eager host seconds per kernel (fwd, bwd), checkpoint wrapper per layer, fused AdamW bandwidth",
                   lambda: (_hf().host.per_kernel_s, _hf().host.backward_kernel_s, _hf().host.checkpoint_forward_layer_s,
                            _hf().host.checkpoint_backward_layer_s, _hf().optimizer.bandwidth_fraction), H200,
                   "Qwen2.5 rows of validation/data/h200_hf/train.jsonl (Llama-3.2-1B, OLMoE, ViT validate)"),
    FittedConstant("implementation/frameworks/hf_transformers.yaml host.sac_forward_kernel_s, sac_backward_kernel_s",
                   "op-level SAC's extra host seconds per forward kernel of a layer (fwd, bwd)",
                   lambda: (_hf().host.sac_forward_kernel_s, _hf().host.sac_backward_kernel_s), H200,
                   "the 2 Qwen2.5-0.5B rows of validation/data/h200_hf/sac.jsonl (Llama-3.2-1B, Qwen2.5-1.5B validate)"),
    FittedConstant("program/op_chains.py EAGER_CHAINS", "HF eager RMSNorm, RoPE, SwiGLU, residual chains",
                   lambda: tuple(EAGER_CHAINS), H200, "the Qwen2.5-0.5B 8x2048 Kineto trace (Llama's validates)"),
    FittedConstant("program/op_chains.py HF_EXPERT_CHAINS; hf_per_expert_loop.yaml syncs.per_expert_forward",
                   "HF MoE block outside its GEMMs (grouped_mm, eager loop; copy bytes) and the loop's syncs",
                   lambda: (dict(HF_EXPERT_CHAINS), profile_named("hf_per_expert_loop").syncs.per_expert_forward),
                   H200, "the 4-layer OLMoE-1B-7B Kineto traces, validation/data/h200_traces/olmoe_l4_* "
                   "(the 16-layer rows validate)"),
    FittedConstant("serving/backends.py HF_EAGER_HOST_LAUNCH_S, HF_COMPILED_STEP_HOST_S",
                   "HF generate host seconds per kernel (eager) and per token (compiled)",
                   lambda: (HF_EAGER_HOST_LAUNCH_S, HF_COMPILED_STEP_HOST_S), H200,
                   "calibration rows of validation/data/h200_hf/decode*.jsonl (simulator validate hf_decode)"),
    FittedConstant("serving/backends.py SDPA_CALLS gqa_single_call, repeat_kv, expanded_cache",
                   "PyTorch SDPA decode by call form: streaming efficiency, per-call floor (s), expansion copy rate",
                   lambda: {k: (v.kv_read_efficiency, v.floor_s, v.copy_efficiency) for k, v in SDPA_CALLS.items()
                            if k != "folded_gqa"}, H200,
                   "calibration rows of validation/data/h200_sdpa/sdpa_decode.jsonl (batch 128 x 4K, batch 1 x 1K; "
                   "validation/sdpa_decode.py fit, the other 96 rows validate)"),
    FittedConstant("serving/backends.py ATTENTION_KERNELS masked_mha",
                   "TensorRT-LLM v0.5.0's masked MHA: HBM efficiency (16-bit, 8-bit cache), K/V elements/s per "
                   "query head, seconds per CTA",
                   lambda: (ATTENTION_KERNELS["masked_mha"].kv_read_efficiency,
                            ATTENTION_KERNELS["masked_mha"].kv_read_efficiency_8bit,
                            ATTENTION_KERNELS["masked_mha"].element_rate, ATTENTION_KERNELS["masked_mha"].cta_s), H200,
                   "each blog row's first and last decode step in validation/data/h200_masked_mha/mmha.jsonl (fp16 "
                   "queries; validation/masked_mha_h200.py fit, the middle steps validate)"),
    FittedConstant("serving/backends.py TORCH_EAGER_CHAINS",
                   "plain PyTorch's serving-layer memory-bound kernels (copy bytes per element)",
                   lambda: (TORCH_EAGER_CHAINS.norm, TORCH_EAGER_CHAINS.residual_add, TORCH_EAGER_CHAINS.rope,
                            TORCH_EAGER_CHAINS.swiglu, TORCH_EAGER_CHAINS.attn_out, TORCH_EAGER_CHAINS.kv_write), H200,
                   "the 16384-token rows of validation/data/h200_prefill_ops (hidden 5120; the 8192- and 2048-token "
                   "rows and the whole-layer rows validate)"),
    FittedConstant("program/op_chains.py CROSS_ENTROPY_BYTES", "unfused cross entropy (copy bytes per logit)",
                   lambda: dict(CROSS_ENTROPY_BYTES), H200, "4 shapes, validation/data/h200_moe_chains"),
    FittedConstant("moe/coefficients.py normal_nvlink_efficiency", "DeepEP normal kernels' NVLink efficiency",
                   lambda: MOE.normal_nvlink_efficiency, KERNEL, "DeepEP v1 README, normal EP8 on H800"),
    FittedConstant("moe/coefficients.py qp_throughput_Bps", "one queue pair's stream throughput (B/s)",
                   lambda: dict(MOE.qp_throughput_Bps), KERNEL, "DeepEP v1 README, normal and IBGDA EP32 on H800"),
    FittedConstant("moe/coefficients.py ll_latency_s, ll_per_node_hop_s", "DeepEP low-latency kernel terms (s)",
                   lambda: (MOE.ll_latency_s, MOE.ll_per_node_hop_s), KERNEL, "DeepEP v1 README, LL EP8 and EP256"),
    FittedConstant("collectives/coefficients.py net_channel_bw_Bps", "NCCL per-channel network throughput (B/s)",
                   lambda: DEFAULT_COEFFICIENTS.net_channel_bw_Bps, KERNEL, "nccl#1221 (2x DGX H100)"),
    FittedConstant("overlap.yaml gpu_speed_sigma", "spread of identical GPUs' speed (straggler factor)",
                   lambda: overlap_coefficients()["gpu_speed_sigma"], KERNEL,
                   "Sinha et al. SC'22 (8% fastest-to-slowest, read as 5.4 sigma; derived, not fitted)"),
    FittedConstant("memory/runtime.py RUNTIME_BYTES, ALLOCATOR_CACHE_BYTES", "device memory outside tensors (B)",
                   lambda: (RUNTIME_BYTES, ALLOCATOR_CACHE_BYTES), H200,
                   "validation/data/h200_memory/memory.jsonl (memory only, no step time)"),
    FittedConstant("memory/nccl.py PROCESS_BYTES, COMM_EXTRA_BYTES", "NCCL memory beyond its buffers (B)",
                   lambda: (PROCESS_BYTES, COMM_EXTRA_BYTES), H200,
                   "validation/data/h200x2_nccl (memory only, no step time)"),
)
"""Every fitted constant the development set's predictions read (module docstring)."""


def refitted(constants: Sequence[FittedConstant] = FITTED_CONSTANTS) -> tuple[FittedConstant, ...]:
    """The constants fitted on published runs of the development set: the ones a fold re-fits."""
    return tuple(c for c in constants if c.fitted_on)


def registry_rows(constants: Sequence[FittedConstant] = FITTED_CONSTANTS) -> list[tuple[str, str, str, str, str]]:
    """One row per constant: name, what, shipped value, what it was fitted on, and its folds."""
    return [(c.name, c.what, _short(c.read()), f"{c.kind}: {c.data}",
             f"re-fitted without {', '.join(c.fitted_on)}" if c.fitted_on else "fixed in every fold")
            for c in constants]


def _short(value: object) -> str:
    """A value in at most 60 characters (floats to 4 significant figures)."""
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, tuple | list):
        text = ", ".join(_short(v) for v in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{k}: {_short(v)}" for k, v in value.items())
    else:
        text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."
