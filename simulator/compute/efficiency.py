"""Achievable-efficiency coefficients of the compute model, as data.

One table per GPU architecture in ``data/compute_efficiency.yaml``; every entry names its source. A table can be
replaced wholesale (``simulate_step(..., efficiency=...)``) or produced from a measured GEMM CSV by
:func:`simulator.compute.fit.fit_gemm_efficiency`.
"""

from __future__ import annotations

from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from simulator.caching import memo
from simulator.errors import UserError
from simulator.yamlio import fast_safe_load

_STRICT = ConfigDict(extra="forbid", frozen=True)


class TileShape(BaseModel):
    """One output-tile configuration a GEMM library may pick (CTA tile m x n), with its relative efficiency."""

    model_config = _STRICT

    m: int = Field(gt=0, description="tile rows")
    n: int = Field(gt=0, description="tile columns")
    efficiency: float = Field(gt=0, le=1, description="throughput of a full wave of these tiles relative to the "
                                                       "largest tile (smaller tiles reuse less data per FLOP)")


class ComputeEfficiency(BaseModel):
    """Coefficients of the GEMM / memory-bound / attention time model for one GPU architecture.

    GEMM time (``simulator.compute.gemm.gemm_times``):
    ``launch_s + max(flops / (peak(dtype) * peak_fraction[dtype] * best_tile_efficiency * k/(k + k_overhead)),
    bytes / (hbm_bandwidth * memory_efficiency))``.
    """

    model_config = _STRICT

    architecture: str = Field(description="GpuSpec.architecture this table applies to")
    source: str = Field(description="where the numbers come from")
    peak_fraction: dict[str, float] = Field(description="fraction of the dense peak large, well-shaped GEMMs reach, "
                                                        "per dtype")
    tiles: tuple[TileShape, ...] = Field(description="tile shapes the library chooses from (best one wins)")
    split_k: tuple[int, ...] = Field((1, 2, 4), description="split-K factors the library may use for small outputs")
    wave_quantization: float = Field(
        1.0, ge=0, le=1, description="weight w of wave quantization: a GEMM of T tiles takes w ceil(T/SMs) + (1 - w) "
                                     "T/SMs waves (1: whole waves, as the NVIDIA guide; below 1: persistent / "
                                     "stream-K tile schedulers fill part of the last wave)")
    split_k_efficiency: float = Field(0.85, gt=0, le=1, description="throughput factor of a split-K kernel "
                                                                    "(extra reduction pass)")
    k_overhead: float = Field(ge=0, description="k/(k + k_overhead): prologue/epilogue cost of short reductions")
    launch_s: float = Field(ge=0, description="fixed time per kernel (launch and tail), s")
    memory_efficiency: float = Field(gt=0, le=1, description="achievable fraction of the HBM bandwidth for "
                                                             "streaming (memory-bound) kernels")
    optimizer_efficiency: float | None = Field(
        None, gt=0, le=1, description="achievable fraction of the HBM bandwidth for the optimizer step's streaming "
                                      "update (None: memory_efficiency); `simulator calibrate --trace` fits it to a "
                                      "trace's optimizer kernels")
    attention_efficiency: float = Field(gt=0, le=1, description="fused (flash) attention FLOP rate as a fraction "
                                                                "of the tensor peak")
    flash2_efficiency: float | None = Field(
        None, gt=0, le=1, description="the FlashAttention-2 package's fused attention rate as a fraction of the "
                                      "tensor peak (None: attention_efficiency, where FlashAttention-2 is the "
                                      "architecture's fused kernel)")
    grouped_efficiency: dict[str, float] = Field(
        default_factory=dict, description="grouped-GEMM kernels (MoE routed experts) relative to a dense GEMM of the "
                                          "same shape, per dtype (1 where not listed)")
    calibration_gpus: int = Field(1, ge=1, description="GPUs that ran together in the measurements these numbers "
                                                       "were fitted to (the expected slowest of them is in the fit)")
    sdpa_by_head_dim: dict[int, float] | None = Field(
        None, description="PyTorch F.scaled_dot_product_attention (flash backend): asymptotic fraction of the "
                          "tensor peak per head dim (interpolated linearly, clamped at the ends)")
    sdpa_half_seq: float = Field(0.0, ge=0, description="sequence length at which SDPA reaches half its "
                                                        "asymptotic rate: rate x s / (s + sdpa_half_seq)")
    sdpa_fwd: tuple[float, float] | None = Field(
        None, description="forward-only causal FlashAttention (a serving prefill): (e, half_seq), the rate "
                          "e x s / (s + half_seq) of the 16-bit tensor peak (None: attention_efficiency)")
    sources: dict[str, str] = Field(default_factory=dict, description="source of each coefficient, by field name")

    def attention_fraction(self, kernel: str, seq_len: float, head_dim: float) -> float:
        """Fraction of the tensor peak a fused attention kernel reaches: ``flash`` (Megatron / Transformer Engine
        fused attention) at ``attention_efficiency``; ``flash2`` (the FlashAttention-2 package) at
        ``flash2_efficiency`` where the architecture has its own figure; ``sdpa`` (plain PyTorch) from the measured
        SDPA table when the architecture has one: e(head_dim) x s / (s + sdpa_half_seq); ``sdpa_fwd`` (forward
        only, a serving prefill) from ``sdpa_fwd``."""
        if kernel == "sdpa_fwd" and self.sdpa_fwd is not None:
            e, half = self.sdpa_fwd
            return e * seq_len / (seq_len + half)
        if kernel == "flash2" and self.flash2_efficiency is not None:
            return self.flash2_efficiency
        if kernel != "sdpa" or not self.sdpa_by_head_dim:
            return self.attention_efficiency
        dims = sorted(self.sdpa_by_head_dim)
        d = min(max(head_dim, dims[0]), dims[-1])
        hi = next(x for x in dims if x >= d)
        lo = max(x for x in dims if x <= d)
        e_lo, e_hi = self.sdpa_by_head_dim[lo], self.sdpa_by_head_dim[hi]
        e = e_lo if hi == lo else e_lo + (e_hi - e_lo) * (d - lo) / (hi - lo)
        return e * seq_len / (seq_len + self.sdpa_half_seq)

    def grouped_fraction(self, dtype: str) -> float:
        """Throughput of a grouped GEMM relative to the dense model of the same shape (1 when not measured)."""
        return self.grouped_efficiency.get(dtype, self.grouped_efficiency.get(dtype.split("_")[0], 1.0))

    def fraction(self, dtype: str) -> float:
        """Peak fraction of ``dtype`` (fp8 falls back to bf16's when not listed)."""
        if dtype in self.peak_fraction:
            return self.peak_fraction[dtype]
        if dtype == "fp8" and "bf16" in self.peak_fraction:
            return self.peak_fraction["bf16"]
        raise UserError(f"no GEMM peak fraction for dtype {dtype!r} on {self.architecture}; "
                        f"known: {', '.join(self.peak_fraction)}", key_path="efficiency.peak_fraction")


@memo(maxsize=64, loaded=True)
def _tables() -> dict[str, ComputeEfficiency]:
    text = (resources.files("simulator.compute") / "data" / "compute_efficiency.yaml").read_text(encoding="utf-8")
    raw = fast_safe_load(text)
    return {arch: ComputeEfficiency(architecture=arch, **entry) for arch, entry in raw.items()}


def default_efficiency(architecture: str) -> ComputeEfficiency:
    """The shipped table for a GPU architecture (``ampere``, ``hopper``, ...)."""
    tables = _tables()
    if architecture in tables:
        return tables[architecture]
    fallback = {"ada": "ampere", "turing": "ampere", "blackwell": "hopper"}.get(architecture)
    if fallback in tables:
        return tables[fallback].model_copy(update={"architecture": architecture,
                                                   "source": f"{architecture}: assumed like {fallback}; "
                                                             + tables[fallback].source})
    raise UserError(f"no compute efficiency table for architecture {architecture!r}; known: {', '.join(tables)}")
