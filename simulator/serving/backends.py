"""Serving backends as small registries keyed by name: the kernel set of a layer, the decode attention kernel and
the expert GEMM kernel. Every number carries its source (or ``assumed`` with the reason).

- **Kernel sets** (``serving.kernels``): how many kernels one transformer layer launches in a decode step. Each
  kernel pays ``ComputeEfficiency.launch_s`` on the GPU (in or out of a CUDA graph), and without CUDA graphs the
  host issues each one: a step then takes at least ``kernels x host_launch_s``. Plain PyTorch's (``torch_eager``)
  memory-bound kernels carry measured copy-equivalent bytes (:class:`EagerChains`).
- **Decode attention** (``serving.attention``): reading the K/V cache is a streaming read at
  ``kv_read_efficiency`` of HBM bandwidth, but a kernel with too few CTAs cannot pull that bandwidth: with one CTA
  per (sequence, K/V head) and no split of the context (PyTorch's SDPA FlashAttention-2 kernel) the rate is at most
  ``CTAs x per_cta_Bps``. Split-KV kernels (flash-decoding: FlashAttention's and FlashInfer's decode kernels, what
  vLLM and SGLang run) split the context until the GPU is full.
- **Prefill attention**: causal FLOPs at the forward FlashAttention curve ``e x s / (s + half_seq)`` of the bf16
  tensor peak: ``sdpa_fwd`` of ``simulator/compute/data/compute_efficiency.yaml``, beside training's attention rates.
- **MoE all-to-all** (``serving.all2all_backend``, vLLM's ``--all2all-backend`` names): registered with the
  training backends in :mod:`simulator.implementation.moe_backends` (``SERVING_BACKENDS``); the plan of a step carries the
  phase's (``ResolvedPlan.moe_backend``).
- **Expert kernels** (``serving.expert_kernel``): throughput of the grouped expert GEMM relative to the dense GEMM
  model of the same shape, by tokens per expert.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPS_DATA = "simulator/validation/data/h200_serve/ops.jsonl"
MMHA_DATA = "simulator/validation/data/h200_masked_mha/mmha.jsonl"
HF_DATA = "simulator/validation/data/h200_hf/decode_run2.jsonl (eager) and decode.jsonl (compiled)"
#: host seconds per kernel of HF eager generate (KERNEL_SETS["hf_eager"]; calibration rows in its source)
HF_EAGER_HOST_LAUNCH_S = 17.97e-6
#: host seconds per token of HF compiled generate around its CUDA-graph replay (KERNEL_SETS["hf_compiled"])
HF_COMPILED_STEP_HOST_S = 2.05e-3


PREFILL_OPS_DATA = "simulator/validation/data/h200_prefill_ops/prefill_ops.jsonl"


@dataclass(frozen=True)
class EagerChains:
    """Copy-equivalent bytes per element (kernel seconds x HBM bandwidth x ``memory_efficiency`` / elements) of
    plain PyTorch's memory-bound kernels in the call forms of benchmarks/device/serve_decode.py's layer, measured in
    isolation (:data:`PREFILL_OPS_DATA`); they replace the fused kernels' byte counts, the RoPE / SwiGLU extras and
    the eager layout copies (simulator/program/serving.py)."""

    norm: float
    """per token x hidden: ``F.rms_norm``"""
    residual_add: float
    """per token x hidden: ``h + branch``"""
    rope: float
    """per token x (q + k heads) x head dim: rotate-and-cat (4 mul, sub, add, cat) over strided views of the fused
    QKV output, cos / sin broadcast"""
    swiglu: float
    """per token x FFN width: ``F.silu(g) * u`` over the two halves of the gate/up output (strided views)"""
    attn_out: float
    """per token x heads x head dim: ``transpose(1, 2).reshape`` of the attention output, a copy (SDPA returns it
    (batch, heads, tokens, head dim)-contiguous)"""
    kv_write: float
    """per K and V element written into the cache: ``copy_`` of the rotated K (contiguous) and of V (a strided view)"""
    source: str


TORCH_EAGER_CHAINS = EagerChains(
    norm=4.80, residual_add=5.32, rope=42.9, swiglu=20.35, attn_out=9.53, kv_write=7.07,
    source=f"{PREFILL_OPS_DATA} (one H200, torch 2.11, bf16, CUDA-graph timed): the 16384-token rows at hidden 5120, "
           "40/8 heads of 128, FFN 13824 x 4.8 TB/s x 0.803 / elements (rope: rope_q + rope_k over q + k width; "
           "kv_write: cache_k + cache_v over both); the 8192- and 2048-token rows validate "
           "(simulator/validation/prefill_ops.py). The fused counts they replace: 4, 6, 4 + 14, 6 + 4, 16 per hidden "
           "element for four layout copies, 4")


@dataclass(frozen=True)
class KernelSet:
    """Kernels one layer launches in a decode step, the host time to issue one without CUDA graphs, the extra
    layout copies of plain PyTorch (``eager_layout``), and bytes beyond the fused kernels' (per element of the
    q+k width for RoPE, per FFN element for SwiGLU)."""

    per_layer: int
    per_step: int
    per_moe_layer: int
    host_launch_s: float
    eager_layout: bool
    source: str
    rope_extra_bytes: float = 0.0
    swiglu_extra_bytes: float = 0.0
    collective_host_s: float = 0.0
    """host seconds to issue one tensor-parallel all-reduce without CUDA graphs (kernels beyond ``per_layer``)"""
    step_host_s: float = 0.0
    """host seconds per decode step that the GPU waits for (serialized with the step's GPU work, added to it): the
    generate loop around a CUDA-graph replay (guards, input copies, sampling, stopping check and its sync)"""
    chains: EagerChains | None = None
    """measured bytes of the plain-PyTorch memory-bound kernels (:class:`EagerChains`) in place of the fused counts
    plus ``rope_extra_bytes``, ``swiglu_extra_bytes`` and ``eager_layout``'s copies; None: those counts"""
    sdpa_call: str = "folded_gqa"
    """how the kernel set calls PyTorch SDPA at decode (``serving.attention: torch_sdpa``; :data:`SDPA_CALLS`), unless
    ``serving.attention_call`` says otherwise"""


KERNEL_SETS: dict[str, KernelSet] = {
    "fused": KernelSet(
        per_layer=11, per_step=4, per_moe_layer=10, host_launch_s=13.3e-6, eager_layout=False,
        collective_host_s=13.3e-6,
        source="vLLM LlamaDecoderLayer (v0.11): fused_add_rms_norm x2, qkv GEMM, rotary_embedding, "
               "reshape_and_cache_flash, attention + split-KV combine, o GEMM, gate_up GEMM, silu_and_mul, down GEMM = "
               "11; per step embedding, final norm, LM head, sampler = 4; a MoE layer adds 10 (router GEMM, top-k, "
               "dispatch, 2 grouped expert GEMMs, activation, combine, shared-expert gate_up / down / activation; "
               "counted from vLLM's FusedMoE forward, assumed for other engines). host_launch_s: as torch_eager (assumed: "
               "vLLM's eager mode issues its custom ops through the same PyTorch dispatcher)"),
    "torch_eager": KernelSet(
        per_layer=27, per_step=4, per_moe_layer=10, host_launch_s=13.3e-6, eager_layout=True,
        source="counted from benchmarks/device/serve_decode.py decode_step: rms_norm x2, 4 GEMMs, rotary as 7 "
               "elementwise kernels each for q and k, 2 cache writes, SDPA, 2 residual adds, silu, mul = 27; "
               "embedding, final norm, LM head, argmax = 4. host_launch_s 13.3 us: the eager step of batch 1 at "
               "1K context (11.5 ms over 868 kernels) in simulator/validation/data/h200_serve/serve.jsonl (the other "
               "eager rows validate it). Extra bytes as counted: RoPE as x1*cos, x2*sin, sub, x2*cos, x1*sin, add, cat "
               "reads 5 and writes 4 half-or-full widths = 18 B per element against the fused kernel's 4 (+14); silu "
               "then mul moves 10 B per FFN element against silu_and_mul's 6 (+4). The measured chains "
               "(TORCH_EAGER_CHAINS) price these kernels in their place",
        rope_extra_bytes=14.0, swiglu_extra_bytes=4.0, collective_host_s=24.5e-6, chains=TORCH_EAGER_CHAINS),
    "hf_eager": KernelSet(
        per_layer=42, per_step=39, per_moe_layer=10, host_launch_s=HF_EAGER_HOST_LAUNCH_S, eager_layout=True,
        rope_extra_bytes=14.0, swiglu_extra_bytes=4.0, collective_host_s=24.5e-6, sdpa_call="gqa_single_call",
        source=f"{HF_DATA}: Hugging Face Transformers 5.17 ``generate`` with DynamicCache, torch 2.11, one H200: "
               "kernels per decode token 1047 (Qwen2.5-0.5B, 24 layers) and 711 (Llama-3.2-1B, 16 layers) at batch "
               "1 give 42 per layer and 39 per step (24 x 42 + 39 = 1047, 16 x 42 + 39 = 711; batch 8: 2 more). "
               "host_launch_s: the mean of ms/token over kernels/token of the calibration rows "
               "(simulator/validation/serving_hf.py CALIBRATION: batch 8, prompt 512 of both models, "
               "18.87 and 17.07 us, mean 17.97 us); the other six eager rows validate it. RoPE and SwiGLU extra bytes as "
               "torch_eager (HF's apply_rotary_pos_emb with rotate_half, act_fn(gate) * up); per_moe_layer: "
               "assumed as fused (no MoE model measured)"),
    "hf_compiled": KernelSet(
        per_layer=19, per_step=35, per_moe_layer=10, host_launch_s=13.3e-6, eager_layout=False,
        step_host_s=HF_COMPILED_STEP_HOST_S,
        source=f"{HF_DATA}: ``generate`` with cache_implementation='static' (torch.compile mode reduce-overhead: "
               "inductor-fused kernels replayed from one CUDA graph per token). Kernels per token 496 / 477 "
               "(Qwen2.5-0.5B batch 1 / 8) and 342 / 331 (Llama-3.2-1B): 19 per layer and 35 per step "
               "(within 2% of each row). step_host_s: measured ms/token minus the model's GPU time on the "
               "calibration rows (simulator/validation/serving_hf.py CALIBRATION: Llama-3.2-1B batch 1 and 8 at "
               "prompt 512: 2.40 and 1.70 ms, mean 2.05 ms); the two Qwen2.5-0.5B rows validate it. It holds the ~30-70 eager launches, 4-9 "
               "memcpys and the stream synchronisation per token around the graph launch"),
}
"""``collective_host_s``: torch_eager's is measured on two H200s (benchmarks/device/nccl_host_and_memory.py,
simulator/validation/data/h200x2_nccl/nccl.jsonl: an eager ``dist.all_reduce`` issued behind a busy GPU takes
24.5 us of host time, a plain kernel launch 7.2 us); fused takes ``host_launch_s`` (assumed: vLLM's custom
all-reduce is one kernel launched through the PyTorch dispatcher)."""


@dataclass(frozen=True)
class KvCacheImpl:
    """How a decode step writes and reads the K/V cache (``serving.kv_cache_impl``), priced in the serving program
    (simulator/program/serving.py) as memory ops and the attention op's bytes:

    - ``concat``: each step builds every layer's K and V anew (``torch.cat([past, new])``): reads the past cache and
      the new token's K/V and writes the whole, ``2 x seqs x (past + new)`` token slots, instead of writing the new
      slots only;
    - ``full_length``: attention runs over the preallocated length (prompt + generated tokens) under an explicit
      mask, not over the tokens filled so far;
    - ``expands_gqa``: with that explicit mask the K/V heads are expanded to every query head before attention
      (``repeat_kv``: read the cache, write ``heads / kv_heads`` copies) and attention reads the expanded copy."""

    concat: bool
    full_length: bool
    expands_gqa: bool
    source: str


_HF = "huggingface/transformers src/transformers"
_HF_COMMIT = "at commit 004999d972e478164dd7e8e508350937c803531e (read through the code index; 5.17's tag not fetched)"
KV_CACHES: dict[str, KvCacheImpl] = {
    "paged": KvCacheImpl(False, False, False, "vLLM / SGLang paged cache: reshape_and_cache writes the new token's "
                                              "K/V slots in place; attention reads the filled blocks"),
    "concat": KvCacheImpl(True, False, False,
                          f"{_HF}/cache_utils.py DynamicLayer.update (torch.cat of keys and values per layer) "
                          f"{_HF_COMMIT}. Decoding without padding skips the mask (masking_utils "
                          "_ignore_causal_mask_sdpa: query length 1, padding mask all ones) so SDPA gets "
                          "enable_gqa=True (integrations/sdpa_attention.py use_gqa_in_sdpa): no expansion"),
    "static": KvCacheImpl(False, True, True,
                          f"{_HF}/cache_utils.py StaticLayer.update (index_copy_ in place into max_cache_len slots; "
                          f"get_mask_sizes returns max_cache_len) {_HF_COMMIT}. Under torch.compile the mask is not "
                          "skipped (_ignore_causal_mask_sdpa is False while dynamo traces) and eager pads it to "
                          "max_cache_len: use_gqa_in_sdpa is False with a mask, so repeat_kv (expand + reshape: a "
                          "copy) gives K and V every query head"),
}


@dataclass(frozen=True)
class AttentionKernel:
    """Decode attention: K/V streamed at ``kv_read_efficiency`` of HBM bandwidth, capped at ``per_cta_Bps`` per CTA
    when ``split_kv`` is False (one CTA per sequence and K/V head)."""

    split_kv: bool
    kv_read_efficiency: float
    per_cta_Bps: float
    source: str
    compute_efficiency: float | None = None
    """Fraction of the bf16 peak when compute-bound; None: the forward FlashAttention curve
    (``ComputeEfficiency.sdpa_fwd``)."""
    floor_s: float | None = None
    """Measured fixed seconds of one call (launch, split-KV combine, tail) in place of ``launch_s``; None: launch_s."""
    expanded: bool = False
    """Reads K/V for every query head (heads / kv_heads copies of the cache), not once per K/V head."""
    copy_efficiency: float | None = None
    """With ``expanded``: the call first copies the cache to every query head (read 1, write heads / kv_heads
    copies) at this fraction of HBM bandwidth; None: the cache is stored expanded."""
    per_query_head: bool = False
    """One CTA per (sequence, query head), each loading its K/V head itself; HBM serves the cache once (a GQA
    group's repeated reads hit the L2) while the CTAs pay ``cta_s`` each and process every query head's K/V
    elements at ``element_rate``."""
    kv_read_efficiency_8bit: float | None = None
    """``kv_read_efficiency`` for a cache of 1-byte elements; None: the same as 16-bit."""
    element_rate: float | None = None
    """K/V elements per second over the GPU, one count per query head; None: not bound by it."""
    cta_s: float = 0.0
    """Fixed seconds per CTA over the GPU (query load, softmax, output) when ``element_rate`` is set."""


ATTENTION_KERNELS: dict[str, AttentionKernel] = {
    "torch_sdpa": AttentionKernel(
        split_kv=False, kv_read_efficiency=0.94, per_cta_Bps=44.5e9,
        source=f"{OPS_DATA}: F.scaled_dot_product_attention decode (GQA group folded into 4 query rows) on one "
               "H200: batch 64 x 8K and 256 x 2K read 2.15 GB per layer in 470 and 479 us (4.57, 4.49 TB/s = 0.94 "
               "of 4.8 TB/s); batch 1 and 8 at 32K both take 377 us (8 and 64 CTAs: 134 MB / 377 us / 8 CTAs = "
               "44.5 GB/s per CTA)"),
    "flash_decoding": AttentionKernel(
        split_kv=True, kv_read_efficiency=0.94, per_cta_Bps=44.5e9,
        source="kv_read_efficiency as torch_sdpa (assumed: the same streaming read of the cache once the kernel "
               "fills the GPU; Dao et al. 2023, Flash-Decoding, split the context so that it does)"),
    "flash_mla": AttentionKernel(
        split_kv=True, kv_read_efficiency=0.896, per_cta_Bps=44.5e9, compute_efficiency=0.586,
        source="deepseek-ai/FlashMLA README (2025-02-24): up to 3000 GB/s memory-bound and 580 TFLOPS compute-bound "
               "on H800 SXM5 (CUDA 12.6, bf16, paged cache of 64-token blocks): 3000 / 3350 GB/s and 580 / 989 "
               "TFLOP/s. Used for MLA models' decode (absorbed: 576-wide scores, 512-wide values per head)"),
    "masked_mha": AttentionKernel(
        split_kv=False, kv_read_efficiency=0.855, kv_read_efficiency_8bit=0.639, per_cta_Bps=44.5e9,
        per_query_head=True, element_rate=3.78e12, cta_s=11.0e-9, compute_efficiency=256 / 4096,
        source="TensorRT-LLM's masked multi-head attention before XQA: NVIDIA/TensorRT-LLM @ 027cd518e3b6 (the first "
               "public tree) and release/0.5.0 @ 11e14500f35d (v0.5.0) decoderMaskedMultiheadAttentionTemplate.h "
               "'assign a threadblock for B x H pair': one CTA per (sequence, query head) loads its K/V head for "
               "itself; q.k and p.v are FP32 FMAs on the CUDA cores. Replaced for GQA by XQA in v0.7-0.8 "
               "(NVIDIA/TensorRT-LLM/docs/source/blogs/XQA-kernel.md). Rates measured: the v0.5.0 kernel on one "
               f"H200 ({MMHA_DATA}; benchmarks/device/trtllm_mmha_bench.cu), fp16 queries: the unique cache "
               "streams at 0.855 of 4.8 TB/s with a 16-bit cache and 0.639 with FP8 e4m3 (8-byte loads where the "
               "16-bit path issues 16-byte ones); the CTAs process 3.78e12 K/V elements/s counted per query head "
               "(a GQA group's repeated reads come from the L2) after 11.0 ns per CTA; fitted "
               "(simulator/validation/masked_mha_h200.py fit) on each blog row's first and last decode step, the "
               "middle steps validate. Per-CTA cap: torch_sdpa's (assumed; batches of 1-8 not measured)"),
}

SDPA_DATA = "simulator/validation/data/h200_sdpa/sdpa_decode.jsonl"
_SDPA_FIT = (f"{SDPA_DATA} (one H200, PyTorch 2.11, bf16, CUDA-graph timing): fitted on the calibration rows of "
             "simulator/validation/sdpa_decode.py (batch 128 x 4K context for the rate, batch 1 x 1K for the floor, "
             "both shapes: 28/4 and 40/8 heads of 128); every other row validates it")
#: PyTorch ``F.scaled_dot_product_attention`` at decode by how it is called (``serving.attention_call``; each kernel
#: set's default: ``KernelSet.sdpa_call``)
SDPA_CALLS: dict[str, AttentionKernel] = {
    "folded_gqa": ATTENTION_KERNELS["torch_sdpa"],
    "gqa_single_call": AttentionKernel(
        split_kv=True, kv_read_efficiency=0.927, per_cta_Bps=44.5e9, floor_s=5.67e-6,
        source=f"all query heads in one call with enable_gqa=True (HF Transformers' sdpa_attention_forward when "
               f"no mask is passed): the cache streamed at 4.45 TB/s (0.927 of 4.8) after a 5.67 us floor; {_SDPA_FIT}"),
    "repeat_kv": AttentionKernel(
        split_kv=True, kv_read_efficiency=0.952, per_cta_Bps=44.5e9, floor_s=7.72e-6, expanded=True,
        copy_efficiency=0.246,
        source="K/V expanded to every query head on each call (HF repeat_kv: expand + reshape; "
               "torch.repeat_interleave measured the same), then SDPA over the copy at expanded_cache's rate: the "
               f"copy moves (1 + heads/kv_heads) x the cache at 1.18 TB/s (0.246 of 4.8), floor 7.72 us; {_SDPA_FIT}"),
    "expanded_cache": AttentionKernel(
        split_kv=True, kv_read_efficiency=0.952, per_cta_Bps=44.5e9, floor_s=4.92e-6, expanded=True,
        source="K/V stored with every query head (a cache expanded once): heads/kv_heads x the cache streamed at "
               f"4.57 TB/s (0.952 of 4.8), floor 4.92 us; {_SDPA_FIT}"),
}
"""``folded_gqa``: the query group folded into the rows of each K/V head, one CTA per sequence and K/V head
(benchmarks/device/serve_decode.py; :data:`ATTENTION_KERNELS` ``torch_sdpa``)."""


@dataclass(frozen=True)
class ExpertKernel:
    """Grouped expert GEMM throughput relative to the dense GEMM model, by tokens per expert (interpolated in log
    tokens, flat outside); ``fp8_only`` kernels need fp8 weights."""

    tokens: tuple[float, ...]
    efficiency: tuple[float, ...]
    fp8_only: bool
    source: str

    def relative(self, tokens_per_expert: float) -> float:
        return float(np.interp(np.log2(max(tokens_per_expert, 1.0)), np.log2(self.tokens), self.efficiency))


_CUTLASS_TOKENS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_CUTLASS_EFF = (0.798, 0.880, 0.870, 0.923, 0.927, 0.951, 0.960, 0.914, 0.850)

EXPERT_KERNELS: dict[str, ExpertKernel] = {
    "cutlass_grouped": ExpertKernel(
        _CUTLASS_TOKENS, _CUTLASS_EFF, False,
        "median per tokens-per-expert of dense model / measured torch._grouped_mm (bf16, CUTLASS grouped GEMM on "
        "sm90) over DeepSeek-V3 and Mixtral expert shapes, 8-32 experts, on one H200 "
        "(simulator/validation/data/h200_moe/moe_gemm.jsonl)"),
    "triton_fused": ExpertKernel(
        _CUTLASS_TOKENS, _CUTLASS_EFF, False,
        "assumed equal to cutlass_grouped: vLLM's Triton fused_moe was not measured here"),
    "deepgemm": ExpertKernel(
        (1.0,), (1.0,), True,
        "fp8 grouped GEMM: the training table's measured fp8 grouped efficiency (grouped_efficiency.fp8 0.706 of "
        "simulator/compute/data/compute_efficiency.yaml) applies through the fp8 dense model; no further factor"),
}


@dataclass(frozen=True)
class AllReduceTable:
    """Measured all-reduce latency of a custom (one-shot / two-shot, NVLink peer-memory) kernel by TP size and
    buffer bytes, interpolated log-log; outside the table (other TP sizes, larger buffers, no NVLink, not Hopper)
    the NCCL model prices the call."""

    sizes: tuple[int, ...]
    times_s: dict[int, tuple[float, ...]]
    architecture: str
    source: str

    def time_s(self, tp: int, nbytes: float) -> float | None:
        if tp not in self.times_s or not self.sizes[0] <= nbytes <= self.sizes[-1]:
            return None
        return float(np.exp(np.interp(np.log(nbytes), np.log(self.sizes), np.log(self.times_s[tp]))))


_AR_SIZES = (512, 4096, 32768, 262144, 524288, 1048576)
_AR_SOURCE = ("sgl-project/sglang#2904: the PR's all-reduce unit test on H100 without CUDA graphs, latency by "
              "TP 2/4/8 and bytes 512 B-1 MiB")

TP_ALLREDUCE: dict[str, AllReduceTable | None] = {
    "nccl": None,
    "vllm_custom": AllReduceTable(_AR_SIZES, {
        2: (9.5e-6, 8.8e-6, 8.7e-6, 12.9e-6, 17.7e-6, 26.6e-6),
        4: (9.1e-6, 8.5e-6, 9.2e-6, 20.6e-6, 26.9e-6, 40.2e-6),
        8: (10.1e-6, 9.3e-6, 11.8e-6, 24.1e-6, 30.4e-6, 45.0e-6)}, "hopper",
        f"{_AR_SOURCE}: vLLM's custom all-reduce (one-shot below 512 KB, two-shot above)"),
    "sglang_custom": AllReduceTable(_AR_SIZES, {
        2: (3.7e-6, 3.9e-6, 4.5e-6, 7.9e-6, 12.5e-6, 19.9e-6),
        4: (4.8e-6, 3.7e-6, 4.8e-6, 13.9e-6, 20.2e-6, 31.1e-6),
        8: (5.9e-6, 5.7e-6, 7.8e-6, 16.7e-6, 22.1e-6, 33.8e-6)}, "hopper",
        f"{_AR_SOURCE}: SGLang's TensorRT-LLM-derived custom all-reduce (copy-input mode)"),
}
