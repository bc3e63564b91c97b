"""``serving.scheduler:``: the serving engine's scheduling policy and memory rule, as data (docs/engine_schedulers.md).

The engine profiles (``frameworks/vllm.yaml``, ``sglang.yaml``, ``tensorrt_llm.yaml``) give it in their
``serving_defaults``; a scenario may override any field. The behaviour each ``policy`` names lives in one place,
:mod:`simulator.serving.scheduler` (one policy object per engine, chosen by this name). Left out (``null``), the
serving loop keeps its original vLLM-like rule, with prefill and decode priced as two steps.

Every default below is an engine default, with its source file and commit:

- ``vllm_v1``: vllm-project/vllm ``vllm/v1/core/sched/scheduler.py`` and ``vllm/engine/arg_utils.py``
  (``get_batch_defaults``: 8192 batched tokens, 1024 sequences for the OpenAI server on GPUs of 70 GiB or more)
  @ 99d7eb5d6a51; the cache is ``gpu_memory_utilization`` of TOTAL memory less everything else
  (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``).
- ``sglang``: sgl-project/sglang ``python/sglang/srt/managers/schedule_policy.py`` (``PrefillAdder``) @ ad0119fdde51,
  ``python/sglang/srt/environ.py`` (new-token ratio 0.7, min factor 0.14, decay over 600 steps, estimate clipped at
  4096 tokens) @ 21ff4b08a196, ``python/sglang/srt/server_args.py`` (``mem_fraction_static = (total - reserved) /
  total``, reserved by GPU size: ``9.5 + (tp x pp) / 2`` GiB below 90 GiB (H100), ``12 + (tp x pp) / 2`` GiB
  below 160 GiB (H200); chunked prefill 8192 on both) @ 469c63e54e7d.
- ``trtllm``: NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp`` (GuaranteedNoEvict and
  MaxUtilization) @ cf6abc45df6e, ``tensorrt_llm/llmapi/llm_args.py`` (``KvCacheConfig.free_gpu_memory_fraction``
  0.9 of the FREE memory after the weights and activations; ``max_batch_size`` 2048, ``max_num_tokens`` 8192)
  @ fcd3f3168280; trtllm-bench's max_batch_size / max_num_tokens rule (``limits: trtllm_bench``):
  ``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting``, ``finetune_setting`` @ a7e572fb20c6.
- start-up profiling (``profile_forward``, ``profile_logit_bytes``): vLLM's ``gpu_model_runner.py`` ``profile_run``
  runs ``_dummy_run(max_num_tokens)`` then ``_dummy_sampler_run`` on min(max_num_seqs, max_num_tokens) rows
  (``compute_logits`` in the model dtype, the sampler's fp32 copy, and on FlashInfer's top-k/top-p path its
  masked fp32 copy and fp32 probabilities: 14 B per logit), and ``determine_available_memory`` keeps that
  peak out of the cache (vllm-project/vllm ``vllm/v1/worker/``, read through the code index: commit not resolved);
  TensorRT-LLM sizes its cache from the memory free after a forward of ``max_num_tokens`` (``KvCacheCreator``, as
  the llm_args.py field above: of the free memory after weights and activations).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

GiB = 2**30
#: the checkpoint formats of model.weight_quantization (simulator/model/quantization.py FORMAT_BYTES)
LAYOUT_FORMATS = ("mxfp4", "nvfp4", "fp8", "fp8_block")


class EngineScheduler(BaseModel):
    """One engine's scheduling rule (module docstring). The step's limits stay in ``serving.max_batched_tokens``
    (vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM max_num_tokens), ``serving.max_num_seqs``
    (max_num_seqs, max_running_requests, max_batch_size) and ``serving.gpu_memory_utilization`` (the engine's memory
    fraction: of total memory for vLLM, mem_fraction_static for SGLang, of free memory for TensorRT-LLM)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Literal["vllm_v1", "sglang", "trtllm"] = Field(
        description="vllm_v1 (running first, preempt the newest by recompute, then FCFS admission within the token "
                    "budget), sglang (prefill-first steps admitted by the new-token-ratio reservation, retract on "
                    "decode OOM) or trtllm (capacity scheduler of `capacity`, in-flight batching)")
    chunked_prefill: bool = Field(True, description="a prompt may be split over steps (vLLM V1 always; SGLang "
                                                    "chunked_prefill_size; TensorRT-LLM enable_chunked_prefill)")
    mixed_batch: bool | None = Field(None, description="prefill chunks and decodes of one step run as ONE forward "
                                                       "(vLLM V1, TensorRT-LLM in-flight batching); false: a step "
                                                       "is a prefill batch or a decode batch (SGLang without "
                                                       "--enable-mixed-chunk); null: the policy's default")
    capacity: Literal["guaranteed_no_evict", "max_utilization"] = Field(
        "guaranteed_no_evict", description="trtllm: GUARANTEED_NO_EVICT (admit only when the blocks of every "
                                           "admitted request's full length fit; never evicts) or MAX_UTILIZATION "
                                           "(admit what this step needs; pause the newest started request)")
    new_token_ratio: float = Field(0.7, ge=0, le=1, description="sglang: initial share of each running request's "
                                                                "remaining output reserved at admission")
    min_new_token_ratio_factor: float = Field(0.14, ge=0, le=1, description="sglang: floor of the ratio, as a "
                                                                            "share of its initial value")
    new_token_ratio_decay_steps: int = Field(600, ge=1, le=10**7, description="sglang: decode steps over which the "
                                                                              "ratio decays to its floor")
    clip_max_new_tokens: int = Field(4096, ge=1, le=10**7, description="sglang: remaining output counted at most "
                                                                       "this many tokens per request")
    limits: Literal["given", "trtllm_bench"] = Field(
        "given", description="given: serving.max_batched_tokens and max_num_seqs as set; trtllm_bench: trtllm-bench's "
                             "rule picks them from the model, the GPUs and serving.input_len / output_len "
                             "(tensorrt_llm/bench/build/tuning.py)")
    profile_forward: bool = Field(
        False, description="vllm_v1 / trtllm: the cache is sized after a start-up forward of the step's whole token "
                           "budget (max_batched_tokens) with 16-bit activations, whose peak stays reserved "
                           "(docs/serving/weight_formats.md); false: the transients of the step at the weights' bytes")
    profile_logit_bytes: float = Field(
        0.0, ge=0, le=64, description="with profile_forward: bytes per logit the start-up sampler run holds for "
                                      "min(max_num_seqs, max_batched_tokens) sequences x the whole vocabulary "
                                      "(vLLM 0.10 on FlashInfer's top-k/top-p path: bf16 logits, their fp32 "
                                      "copy, the masked copy and the probabilities, 14)")
    expert_layout_bytes: tuple[tuple[Literal["mxfp4", "nvfp4", "fp8", "fp8_block"], float], ...] = Field(
        (), description="a mapping {format: B per weight}: bytes per expert weight the engine's MoE kernels hold, by "
                        "checkpoint format (model.weight_quantization.format), at least the format's bytes, at most "
                        "4: their weight layout (padding, swizzled scales); the difference is kept out of the K/V "
                        "cache; a format not listed: the checkpoint's bytes (held as sorted pairs: hashable)")
    reserved_gib: tuple[tuple[float, float, float], ...] = Field(
        ((20, 2.8, 0.1), (35, 2.8, 0.1), (90, 9.5, 0.5), (100, 12.0, 0.5), (160, 12.0, 0.5), (1e9, 32.0, 0.0)),
        description="sglang: memory kept out of mem_fraction_static by GPU size, rows (below GiB, base GiB, GiB per "
                    "rank of tp x pp): the first row whose bound exceeds the GPU's memory applies")

    @field_validator("expert_layout_bytes", mode="before")
    @classmethod
    def _layout_pairs(cls, value):
        """The YAML mapping as sorted (format, bytes) pairs; anything else is left to the type's own error."""
        if not isinstance(value, dict):
            return value
        for fmt in value:
            if fmt not in LAYOUT_FORMATS:
                raise ValueError(f"unknown checkpoint format {fmt!r} (one of {', '.join(LAYOUT_FORMATS)})")
        return tuple(sorted(value.items()))

    def layout_of(self, fmt: str) -> float | None:
        """Bytes per expert weight the engine holds for checkpoint format ``fmt``; None when not listed."""
        return dict(self.expert_layout_bytes).get(fmt)

    @model_validator(mode="after")
    def _fields_of_the_policy(self):
        if self.policy != "trtllm" and "capacity" in self.model_fields_set:
            raise ValueError(f"capacity is a trtllm setting, not {self.policy}'s")
        if self.policy == "sglang" and (self.profile_forward or self.profile_logit_bytes):
            raise ValueError("profile_forward and profile_logit_bytes are vllm_v1 / trtllm rules: sglang reserves "
                             "by reserved_gib")
        if self.policy != "trtllm" and self.limits != "given":
            raise ValueError(f"limits {self.limits} is trtllm-bench's rule, not {self.policy}'s")
        for fmt, b in self.expert_layout_bytes:
            if not 0 < b <= 4:  # below the checkpoint's own bytes: simulator/serving/scheduler.py layout_bytes
                raise ValueError(f"expert_layout_bytes.{fmt}: {b:g} B per weight must be above 0 and at most 4")
        bounds = [row[0] for row in self.reserved_gib]
        if not self.reserved_gib or any(v < 0 for row in self.reserved_gib for v in row) or bounds != sorted(bounds):
            raise ValueError("reserved_gib: rows (below GiB, base GiB, GiB per rank) of numbers at least 0, "
                             "their bounds increasing")
        return self

    def reserved_bytes(self, total_bytes: float, ranks: int) -> float:
        """SGLang's reserved memory on a GPU of ``total_bytes`` with ``ranks`` = tp x pp (server_args.py)."""
        for below, base, per_rank in self.reserved_gib:
            if total_bytes < below * GiB:
                return (base + per_rank * ranks) * GiB
        return 0.0
