"""GPU spec: the chip down to the SM, its stated peaks, memory and links.

Peaks are derived from the SM-level counts: ``SMs x FLOP per clock per SM x the clock the datasheet quotes the
peak at``. The stated datasheet peaks are kept beside the counts, and a profile whose counts do not reproduce its
stated tensor peaks within 1% is rejected at load time (a typo in either shows up immediately).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simulator.hardware.fields import Bandwidth, Bytes, FlopRate, Hertz, Spec

#: the number formats a GPU may compute in; ``fp64_tensor`` is the FP64 tensor-core (DMMA) path
Dtype = Literal["fp64", "fp64_tensor", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8"]
#: 16/8/6/4-bit and TF32 tensor-core dtypes (fp6 and fp4: Blackwell), whose peaks NVIDIA quotes at the tensor peak clock
TENSOR_DTYPES: tuple[str, ...] = ("tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8")
#: stated peaks must match the SM-level derivation within this relative error
PEAK_CONSISTENCY_TOLERANCE = 0.01
#: vector (non-tensor) datasheet figures are often rounded to two digits (e.g. H100 "FP64 34 TFLOP/s" = 33.5)
VECTOR_PEAK_TOLERANCE = 0.02


class DieLayout(Spec):
    """Full-die hierarchy (the product may enable fewer SMs than the die has)."""

    gpcs: int = Field(gt=0, description="graphics processing clusters on the full die")
    tpcs_per_gpc: int = Field(gt=0, description="texture processing clusters per GPC")
    sms_per_tpc: int = Field(gt=0, description="streaming multiprocessors per TPC")

    @property
    def sms(self) -> int:
        """SMs on the full die."""
        return self.gpcs * self.tpcs_per_gpc * self.sms_per_tpc


class StreamingMultiprocessor(Spec):
    """Per-SM resources and dense throughput per clock."""

    processing_blocks: int = Field(4, gt=0, description="SM sub-partitions, each with a warp scheduler")
    fp32_cores: int = Field(gt=0, description="FP32 lanes per SM")
    tensor_cores: int = Field(gt=0, description="tensor cores per SM")
    tensor_core_generation: int = Field(gt=0, le=6)
    register_file_bytes: Bytes
    l1_shared_bytes: Bytes = Field(description="combined L1 data cache / shared memory per SM")
    max_shared_bytes: Bytes = Field(description="largest shared-memory carve-out per SM")
    dense_flops_per_clock: dict[Dtype, float] = Field(
        description="dense FLOP (or integer OP) per clock per SM, per dtype (FP32 accumulate for fp16/bf16)")

    @model_validator(mode="after")
    def _positive(self) -> StreamingMultiprocessor:
        bad = {k: v for k, v in self.dense_flops_per_clock.items() if v <= 0}
        if bad:
            raise ValueError(f"dense_flops_per_clock must be positive, got {bad}")
        return self


class Clocks(Spec):
    """SM clocks. NVIDIA quotes tensor peaks at one clock and vector FP32/FP64 peaks sometimes at another."""

    max_sm: Hertz = Field(description="maximum boost SM clock")
    tensor_peak: Hertz = Field(description="clock behind the datasheet's tensor-core peaks (1830 MHz on H100 SXM)")
    vector_peak: Hertz | None = Field(None, description="clock behind the FP32/FP64 vector peaks (default: tensor_peak)")

    @property
    def vector(self) -> float:
        return self.vector_peak or self.tensor_peak


class Memory(Spec):
    """Device memory. ``capacity`` is what the driver reports (nvidia-smi memory.total, in MiB), the figure memory
    verdicts and K/V capacities are measured against; datasheets round it (H200 "141 GB" where the card reports
    143,771 MiB = 150.8 GB) and are kept beside it in ``datasheet_capacity``."""

    kind: str = Field(description="HBM2, HBM2e, HBM3, HBM3e, GDDR6X, ...")
    capacity: Bytes = Field(description="total memory as the driver reports it (nvidia-smi --query-gpu=memory.total, "
                            "MiB); the driver reserves a few hundred MiB of it for itself (nvidia-smi -q: Reserved)")
    capacity_source: str = Field("", description="where ``capacity`` comes from: an nvidia-smi output (cited), or "
                                 "why it is the datasheet figure (every shipped profile says)")
    datasheet_capacity: Bytes | None = Field(None, description="the datasheet's figure, for reference (not used by "
                                             "the model)")
    bandwidth: Bandwidth = Field(description="peak DRAM bandwidth")
    l2: Bytes = Field(description="L2 cache size")


class NvlinkPort(Spec):
    """The GPU's NVLink ports (to switches or a bridge)."""

    generation: int = Field(ge=1, le=6)
    links: int = Field(gt=0, description="NVLink links on the GPU")
    bandwidth_per_link: Bandwidth = Field(description="per link, per direction")

    @property
    def total_Bps(self) -> float:
        """All links together, per direction."""
        return self.links * self.bandwidth_per_link


class PcieEndpoint(Spec):
    generation: int = Field(ge=1, le=6)
    lanes: int = Field(gt=0, le=32)

    @property
    def bandwidth_Bps(self) -> float:
        """Theoretical per-direction bandwidth after 128b/130b (Gen3+) or 8b/10b (Gen1-2) encoding."""
        return pcie_bandwidth_Bps(self.generation, self.lanes)


#: PCI-SIG transfer rate per lane in GT/s and the line encoding efficiency per generation (PCIe base specs)
_PCIE_GTPS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def pcie_bandwidth_Bps(generation: int, lanes: int) -> float:
    """Per-direction PCIe bandwidth in B/s: lanes x GT/s x encoding / 8 (Gen4 x16 = 31.5 GB/s, Gen5 x16 = 63)."""
    encoding = 0.8 if generation <= 2 else 128 / 130  # 8b/10b, then 128b/130b (Gen6 FLIT treated alike)
    return lanes * _PCIE_GTPS[generation] * 1e9 * encoding / 8


class GpuPower(Spec):
    """Board power by load, W (the whole-run energy model's phases, docs/whole_run.md "Energy")."""

    compute_W: float = Field(gt=0, description="tensor-core bound (back-to-back GEMMs)")
    memory_bound_W: float = Field(gt=0, description="HBM bound (device-to-device copies)")
    host_bound_W: float = Field(gt=0, description="launch bound: tiny kernels issued from the host")
    idle_W: float = Field(gt=0, description="context created, no kernels")
    source: str = Field(description="where the figures come from")


class GpuSpec(Spec):
    """One GPU model. Field units: bytes, B/s per direction, Hz, FLOP/s."""

    name: str
    source: str = Field(description="datasheet / whitepaper the numbers come from")
    architecture: Literal["turing", "ampere", "ada", "hopper", "blackwell"]
    compute_capability: str = Field(pattern=r"^\d+\.\d+$", description="CUDA compute capability, 'major.minor'")
    die: DieLayout
    sms: int = Field(gt=0, description="SMs enabled on this product")
    sm: StreamingMultiprocessor
    clocks: Clocks
    stated_dense_peaks: dict[Dtype, FlopRate] = Field(description="datasheet dense peaks per dtype")
    sparsity_factor: float = Field(2.0, ge=1.0, description="speed-up of 2:4 structured sparsity on tensor cores")
    fp16_accumulate_speedup: float = Field(
        1.0, ge=1.0, description="tensor fp16 with fp16 accumulate vs fp32 accumulate (2 on GeForce Ampere)")
    memory: Memory
    nvlink: NvlinkPort | None = None
    pcie: PcieEndpoint
    tdp_w: float = Field(gt=0, description="board power, W")
    power: GpuPower | None = Field(None, description="measured board power by load (null: scaled from tdp_w)")

    @property
    def compute_capability_version(self) -> tuple[int, int]:
        """``compute_capability`` as numbers (major, minor): compare these, never the strings ("10.0" < "9.0")."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @model_validator(mode="after")
    def _consistent(self) -> GpuSpec:
        if self.sms > self.die.sms:
            raise ValueError(f"sms ({self.sms}) exceeds the full die's {self.die.sms} SMs")
        for dtype, stated in self.stated_dense_peaks.items():
            if dtype not in self.sm.dense_flops_per_clock:
                raise ValueError(f"stated_dense_peaks.{dtype} has no sm.dense_flops_per_clock.{dtype} to derive it")
            derived = self.dense_peak_flops(dtype)
            tolerance = PEAK_CONSISTENCY_TOLERANCE if dtype in TENSOR_DTYPES else VECTOR_PEAK_TOLERANCE
            if abs(derived / stated - 1) > tolerance:
                raise ValueError(
                    f"stated {dtype} peak {stated / 1e12:.1f} TFLOP/s disagrees with the SM-level derivation "
                    f"{self.sms} SMs x {self.sm.dense_flops_per_clock[dtype]:g} FLOP/clk x "
                    f"{self.peak_clock_hz(dtype) / 1e6:.0f} MHz = {derived / 1e12:.1f} TFLOP/s (> {tolerance:.0%})")
        return self

    def peak_clock_hz(self, dtype: str) -> float:
        """Clock behind the stated peak of ``dtype``: tensor-core dtypes at ``tensor_peak``, FP32/FP64 at ``vector``."""
        return self.clocks.tensor_peak if dtype in TENSOR_DTYPES else self.clocks.vector

    def dense_peak_flops(self, dtype: str) -> float:
        """Dense peak of ``dtype`` in FLOP/s derived from the SM counts at the datasheet's quoted clock."""
        per_clock = self.sm.dense_flops_per_clock.get(dtype)  # type: ignore[call-overload]
        if per_clock is None:
            raise KeyError(f"{self.name} has no {dtype} throughput")
        return self.sms * per_clock * self.peak_clock_hz(dtype)

    def sparse_peak_flops(self, dtype: str) -> float:
        """2:4 structured-sparsity peak (tensor dtypes only)."""
        factor = self.sparsity_factor if dtype in TENSOR_DTYPES else 1.0
        return self.dense_peak_flops(dtype) * factor

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.sm.dense_flops_per_clock)
