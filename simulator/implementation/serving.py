"""``serving:``: the workload and the serving engine's choices (docs/serving.md; docs/interface.md ``simulator serve``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.errors import UserError
from simulator.implementation.host import EngineHost
from simulator.implementation.moe_backends import AUTO, SERVING_BACKENDS
from simulator.implementation.scheduler import EngineScheduler
from simulator.implementation.speculative import SpeculativeConfig
from simulator.implementation.workload import Workload

#: prefill steps one prefill may take (batch and prompt over max_batched_tokens): each is priced op by op
MAX_PREFILL_STEPS = 4096
#: points of the latency-throughput curve
MAX_CURVE_POINTS = 64
#: requests simulated per request-rate point (each is scheduled step by step: simulator/serving/loop.py)
MAX_SIMULATED_REQUESTS = 100_000

#: ``serving.all2all_backend`` names, from the registry (simulator/implementation/moe_backends.py)
A2A_BACKENDS = tuple(SERVING_BACKENDS)
EXPERT_KERNELS = ("triton_fused", "cutlass_grouped", "deepgemm")
#: kernel sets whose framework decides CUDA graphs at decode: HF generate eager never captures; with a static cache
#: it compiles the decoding forward in torch.compile's reduce-overhead mode, one graph replay per token
#: (simulator/validation/data/h200_hf/decode.jsonl per_token_runtime_calls: cudaGraphLaunch 1 per token, none in eager)
FRAMEWORK_GRAPHS = {"hf_eager": False, "hf_compiled": True}


class Disaggregation(BaseModel):
    """Separate prefill and decode pools (docs/serving/disaggregation.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_replicas: int = Field(ge=1, le=1_000_000, description="DP replicas that only prefill; the other "
                                                                  "replicas only decode (at least one must remain)")



def _curve(value, one: str, many: str, ok, bounds: str):
    """A curve's points (concurrencies, request rates): null, or 1 to MAX_CURVE_POINTS values each ``ok``."""
    if value is not None:
        if not value:
            raise ValueError(f"give at least one {one}, or null")
        if not all(ok(v) for v in value):
            raise ValueError(f"each {one} must be {bounds}")
        if len(value) > MAX_CURVE_POINTS:
            raise ValueError(f"at most {MAX_CURVE_POINTS} {many}, got {len(value)}")
    return value

class ServingConfig(BaseModel):
    """A static batch of ``batch`` sequences (prefill together, then decode together), plus an optional
    latency-throughput curve over ``concurrency`` (continuous batching in steady state)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: int = Field(ge=1, le=1_000_000, description="sequences in flight together per replica (decode batch)")
    input_len: int = Field(ge=1, le=10_000_000, description="prompt tokens per sequence (context at the first "
                                                           "decode step)")
    output_len: int = Field(ge=1, le=10_000_000, description="generated tokens per sequence")
    cuda_graphs: bool = Field(True, description="decode captured in CUDA graphs (no host launch cost per kernel)")
    cuda_graph_batch_sizes: tuple[int, ...] | None = Field(
        None, description="decode batch sizes the engine captured (with cuda_graphs): a decode step of any other "
                          "sequence count is issued eagerly (TensorRT-LLM's CudaGraphConfig without padding); "
                          "None: every decode batch replays a graph")
    concurrency: tuple[int, ...] | None = Field(
        None, description="requests in flight in the whole system: one point of the latency-throughput curve each")
    kernels: Literal["fused", "torch_eager", "hf_eager", "hf_compiled"] = Field(
        "fused", description="kernel set of a layer: fused (vLLM / SGLang custom ops), torch_eager (plain PyTorch "
                             "modules, as benchmarks/device/serve_decode.py), hf_eager (Hugging Face generate, "
                             "eager: never CUDA graphs) or hf_compiled (generate with a static cache under "
                             "torch.compile reduce-overhead: always one CUDA graph per token)")
    kv_cache_impl: Literal["paged", "concat", "static"] = Field(
        "paged", description="K/V cache: paged (vLLM / SGLang: new slots written in place), concat (HF DynamicCache: "
                             "torch.cat copies every layer's cache each step) or static (HF StaticCache: "
                             "input_len + output_len slots, attention over all of them with K/V expanded to every "
                             "query head)")
    attention: Literal["flash_decoding", "torch_sdpa", "flash_mla", "masked_mha"] = Field(
        "flash_decoding", description="decode attention kernel: flash_decoding (split-KV: FlashAttention / "
                                      "FlashInfer as vLLM runs them; FlashMLA's rates for MLA models), torch_sdpa "
                                      "(one CTA per sequence and K/V head), flash_mla or masked_mha (TensorRT-LLM "
                                      "before XQA: one CTA per sequence and query head, K/V read per query head)")
    attention_call: Literal["folded_gqa", "gqa_single_call", "repeat_kv", "expanded_cache"] | None = Field(
        None, description="attention torch_sdpa: how SDPA is called at decode (simulator/serving/backends.py "
                          "SDPA_CALLS): folded_gqa (query group folded into each K/V head's rows), gqa_single_call "
                          "(enable_gqa, all query heads in one call), repeat_kv (K/V expanded per call) or "
                          "expanded_cache (K/V stored per query head); null: the kernel set's (hf_eager: "
                          "gqa_single_call, others folded_gqa)")
    all2all_backend: Literal[A2A_BACKENDS] = Field(  # type: ignore[valid-type]
        AUTO.name, description="MoE all-to-all (vLLM --all2all-backend); auto: deepep_high_throughput for prefill, "
                            "deepep_low_latency for decode")
    expert_kernel: Literal["triton_fused", "cutlass_grouped", "deepgemm"] = Field(
        "triton_fused", description="MoE expert GEMM kernel (vLLM fused_moe Triton, CUTLASS grouped, DeepGEMM)")
    tp_allreduce: Literal["nccl", "vllm_custom", "sglang_custom", "trtllm_custom"] = Field(
        "nccl", description="TP all-reduce: nccl (the collectives model: LL/LL128/NVLS, ring/tree) or an engine's "
                            "custom one-shot / two-shot kernel under the engine's rule (one node, NVLink, its group "
                            "sizes and size limit; simulator/collectives/custom_allreduce.py): measured latency on "
                            "Hopper at TP 2/4/8 up to 1 MiB, the fitted one-/two-shot model elsewhere; NCCL where "
                            "the engine calls NCCL. The vllm, sglang and tensorrt_llm profiles default to their own")
    two_batch_overlap: bool = Field(
        False, description="MoE layers run as two micro-batches, one's dispatch/combine under the other's compute "
                           "(SGLang --enable-two-batch-overlap, vLLM --enable-dbo; DeepSeek's prefill and decode); "
                           "priced per phase in simulator/serving/tbo.py; only with EP > 1")
    kv_block_size: int = Field(16, ge=1, le=4096, description="KV-cache page size in tokens (vLLM block_size)")
    sliding_window_cache: Literal["full", "window", "swa_pool"] = Field(
        "window", description="K/V cache of sliding-window layers (model.sliding_window; simulator/memory/kv_window.py): "
                              "window (vLLM V1's hybrid KV cache manager, v0.10.0 on: a windowed layer keeps at most "
                              "ceil((w - 1) / kv_block_size) + 1 pages), swa_pool (SGLang's SWAKVPool: a separate "
                              "windowed pool of 0.8 x the full pool's tokens) or full (every layer keeps every "
                              "token: vLLM --disable-hybrid-kv-cache-manager). The paged cache only")
    gpu_memory_utilization: float = Field(
        0.92, gt=0, le=1, description="share of each GPU's HBM the engine may fill with weights, transients and the "
                                      "K/V cache (vLLM --gpu-memory-utilization: 0.92 since vLLM 0.21, 0.9 before; "
                                      "the CUDA context and NCCL's buffers sit in the rest)")
    max_batched_tokens: int | None = Field(
        None, ge=1, le=10_000_000, description="chunked prefill: at most this many prompt tokens per step "
                                               "(vLLM max_num_batched_tokens); null: a whole prompt per step")

    request_rate: tuple[float, ...] | None = Field(
        None, description="open-loop Poisson arrivals, requests/s to the whole system: one point of the "
                          "request-rate curve each (simulated step by step: TTFT / TPOT / e2e percentiles)")
    num_requests: int = Field(1000, ge=20, le=MAX_SIMULATED_REQUESTS,
                              description="requests simulated per request-rate point (the first 10% are warm-up)")
    arrival_seed: int = Field(0, ge=0, description="seed of the Poisson arrival times")
    max_num_seqs: int | None = Field(
        None, ge=1, le=1_000_000, description="largest batch of the request-rate simulation (vLLM max_num_seqs); "
                                              "null: only the K/V cache limits it")

    scheduler: EngineScheduler | None = Field(
        None, description="the engine's scheduling policy and memory rule (vllm_v1, sglang, trtllm; the engine "
                          "profiles give it: simulator/implementation/scheduler.py); null: vLLM V1's rule with "
                          "prefill and decode priced as two steps")
    host: EngineHost | None = Field(
        None, description="the engine's host costs per step and per request (simulator/implementation/host.py, "
                          "docs/engine_host.md; the engine profiles give them); null: none priced")
    workload: Workload | None = Field(
        None, description="request stream of simulator serve --bench (lengths, prefix hits, arrivals; "
                          "simulator/implementation/workload.py); null: fixed lengths, all at t = 0")
    disaggregation: Disaggregation | None = Field(
        None, description="disaggregated prefill/decode: {prefill_replicas: N}; null: every replica does both")
    speculative: SpeculativeConfig | None = Field(
        None, description="speculative decoding (simulator/implementation/speculative.py, docs/speculative.md); "
                          "null: one token per decode step")

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value):
        return _curve(value, "concurrency", "concurrencies", lambda v: 1 <= v <= 1_000_000,
                      "between 1 and 1,000,000")

    @field_validator("request_rate")
    @classmethod
    def _rates(cls, value):
        return _curve(value, "request rate", "request rates", lambda v: 0 < v <= 1e9,
                      "above 0 and at most 1e9 requests/s")

    @model_validator(mode="before")
    @classmethod
    def _graphs_default_of_the_kernel_set(cls, data):
        """HF generate decides CUDA graphs itself: ``cuda_graphs`` left out takes its value."""
        if isinstance(data, dict) and data.get("kernels") in FRAMEWORK_GRAPHS and "cuda_graphs" not in data:
            data = {**data, "cuda_graphs": FRAMEWORK_GRAPHS[data["kernels"]]}
        return data

    @model_validator(mode="after")
    def _graphs_of_the_kernel_set(self):
        """A ``cuda_graphs`` contrary to what HF generate does is an error."""
        forced = FRAMEWORK_GRAPHS.get(self.kernels)
        if forced is not None and self.cuda_graphs != forced:
            raise UserError(f"kernels {self.kernels} {'always' if forced else 'never'} replays CUDA graphs: "
                            f"set cuda_graphs: {str(forced).lower()} or leave it out", key_path="serving.cuda_graphs")
        return self

    @field_validator("cuda_graph_batch_sizes")
    @classmethod
    def _capture_sizes(cls, value):
        if value is not None and (not value or any(not 1 <= v <= 1_000_000 for v in value)):
            raise ValueError("cuda_graph_batch_sizes lists decode batch sizes from 1 to 1,000,000 (leave it out for "
                             "every size)")
        return value

    @model_validator(mode="after")
    def _rate_sets_the_arrivals(self):
        if self.request_rate is not None and self.workload is not None and self.workload.arrival.process == "csv":
            raise ValueError("request_rate sets each point's arrival rate: a csv of arrival times is for "
                             "simulator serve --bench (leave request_rate out, or use a poisson, constant or gamma "
                             "arrival process)")
        return self

    @model_validator(mode="after")
    def _sdpa_call(self):
        """``attention_call`` is PyTorch SDPA's; a static cache already expands K/V (kv_cache_impl prices it)."""
        call = self.attention_call
        if call is not None and self.attention != "torch_sdpa":
            raise UserError(f"attention_call {call} is how PyTorch SDPA is called: it needs attention: torch_sdpa "
                            f"(got {self.attention})", key_path="serving.attention_call")
        if call in ("repeat_kv", "expanded_cache") and self.kv_cache_impl == "static":
            raise UserError(f"kv_cache_impl static already expands K/V to every query head (priced with the cache); "
                            f"attention_call {call} would expand it twice: use folded_gqa or leave it out",
                            key_path="serving.attention_call")
        return self

    @model_validator(mode="after")
    def _window_cache_is_paged(self):
        """Only a paged cache frees a windowed layer's old pages; HF's caches keep what their class keeps."""
        if "sliding_window_cache" in self.model_fields_set and self.sliding_window_cache != "full" \
                and self.kv_cache_impl != "paged":
            raise UserError(f"sliding_window_cache {self.sliding_window_cache} is a paged cache's rule (vLLM, "
                            f"SGLang); kv_cache_impl {self.kv_cache_impl} keeps every token: use full or "
                            "kv_cache_impl: paged", key_path="serving.sliding_window_cache")
        return self

    @model_validator(mode="after")
    def _draft_within_the_output(self):
        """A draft of k tokens needs more than k tokens left to generate: the model counts E tokens per iteration
        over the whole output."""
        spec = self.speculative
        if spec is not None and spec.num_speculative_tokens >= self.output_len:
            raise UserError(f"a draft of num_speculative_tokens {spec.num_speculative_tokens} is longer than the "
                            f"output_len {self.output_len} tokens it would speculate on: k must be below output_len",
                            key_path="serving.speculative.num_speculative_tokens")
        return self

    @model_validator(mode="after")
    def _rate_without_disaggregation(self):
        if self.request_rate is not None and self.disaggregation is not None:
            raise ValueError("request_rate is simulated for replicas that prefill and decode; with disaggregation "
                             "use concurrency (the steady-state curve)")
        return self

    @model_validator(mode="after")
    def _prefill_steps(self):
        """Chunked prefill of the batch must take at most MAX_PREFILL_STEPS steps (each is priced op by op). The
        error names the key whose value makes the steps many: ``serving.batch`` (sequences per step times steps
        per prompt) or ``serving.input_len`` (chunks of one prompt)."""
        if self.max_batched_tokens is not None:
            chunk = min(self.input_len, self.max_batched_tokens)
            per_step = max(1, min(self.batch, self.max_batched_tokens // chunk))
            rounds, chunks = -(-self.batch // per_step), -(-self.input_len // chunk)
            if rounds * chunks > MAX_PREFILL_STEPS:
                key = "batch" if rounds >= chunks else "input_len"
                raise UserError(f"max_batched_tokens {self.max_batched_tokens} "
                                f"splits the prefill of {self.batch:,} x {self.input_len:,} tokens into "
                                f"{rounds * chunks:,} steps, more than {MAX_PREFILL_STEPS:,}: lower serving.{key} or "
                                "raise serving.max_batched_tokens", key_path=f"serving.{key}")
        return self
