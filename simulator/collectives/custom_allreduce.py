"""Custom one-shot / two-shot all-reduce kernels of the serving engines, inside one NVLink domain.

vLLM, SGLang and TensorRT-LLM replace NCCL for small tensor-parallel all-reduces with kernels that read the peers'
buffers directly over NVLink (CUDA IPC), synchronised by flags instead of NCCL's protocol:
- **one-shot**: every rank reads the whole buffer of each of the n-1 others and reduces it: ``(n-1) S`` bytes in per
  rank, one synchronisation;
- **two-shot**: a reduce-scatter (each rank reduces its S/n slice from the n-1 others) then an all-gather of the
  slices: ``2 (n-1)/n S`` bytes in per rank, a second synchronisation between the halves.
Either takes ``latency + bytes in / read rate`` (:func:`custom_time_s`); the two kernel families' latencies and read
rates (:data:`KERNELS`) are least-squares fits (relative error) to the latencies of sgl-project/sglang#2904 (H100,
TP 2/4/8, 512 B-1 MiB, without CUDA graphs, so the input copy to the registered buffer and the launch are in the
latency), the read rate as a fraction of the GPU's NVLink bandwidth so that it scales with the link.

Which kernel runs is each engine's rule (:data:`ENGINES`, :func:`choose`); a tensor the rule leaves to NCCL (too
large, a group size the kernel lacks, a group beyond one node or without NVLink between every pair) gets ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.collectives.placement import GroupPlacement
from simulator.units.constants import MICRO, KiB, MiB

#: the custom kernels' algorithm names in the collectives table (never NCCL's auto choice: simulator.collectives.model)
CUSTOM_ALGORITHMS = ("one_shot", "two_shot")


@dataclass(frozen=True)
class CustomKernel:
    """One kernel family: seconds of a one-shot and a two-shot call of ``S`` bytes on ``n`` ranks."""

    one_shot_latency_s: float
    two_shot_latency_s: float
    read_fraction: float  # bytes in per second per rank, as a fraction of the placement's NVLink bandwidth
    source: str


def custom_time_s(kernel: CustomKernel, placement: GroupPlacement, algorithm: str, nbytes: float) -> float:
    """``latency + bytes in / (read_fraction x NVLink bandwidth)``, bytes in ``(n-1) S`` (one-shot) or ``2 (n-1)/n S``
    (two-shot) (module docstring)."""
    n = placement.n_ranks
    rate = kernel.read_fraction * placement.intra_bw_Bps
    if algorithm == "one_shot":
        return kernel.one_shot_latency_s + (n - 1) * nbytes / rate
    if algorithm == "two_shot":
        return kernel.two_shot_latency_s + 2 * (n - 1) / n * nbytes / rate
    raise ValueError(f"unknown custom all-reduce {algorithm!r}; accepted: {', '.join(CUSTOM_ALGORITHMS)}")


_FIT = ("least-squares fit (relative error) to sgl-project/sglang#2904's H100 latencies at TP 2/4/8, 512 B-1 MiB "
        "(simulator/serving/backends.py TP_ALLREDUCE), each point under the engine's own one-/two-shot rule; read "
        "rate over H100's 450 GB/s NVLink")
KERNELS = {
    "vllm": CustomKernel(8.75 * MICRO, 15.96 * MICRO, 64.1 / 450,
                         f"vLLM csrc/custom_all_reduce.cuh cross_device_reduce_1stage / _2stage; {_FIT} "
                         "(vllm_custom rows): median error 4%, max 13%"),
    "trtllm": CustomKernel(4.30 * MICRO, 14.10 * MICRO, 99.8 / 450,
                           f"TensorRT-LLM customAllReduceKernels ONESHOT / TWOSHOT (SGLang's sgl-kernel copy); {_FIT} "
                           "(sglang_custom rows): median error 12%, max 36%"),
}


def _vllm_rule(n: int, nbytes: float) -> str | None:
    """vllm-project/vllm vllm/distributed/device_communicators/custom_all_reduce.py@00d618aa: custom kernels for
    2, 4, 6 or 8 ranks and tensors under max_size = 8 MiB; csrc/custom_all_reduce.cuh@c9eabec7 (REDUCE_CASE): one-shot
    on 2 ranks, or below 512 KiB on up to 4 ranks and 256 KiB on up to 8, else two-shot."""
    if n not in (2, 4, 6, 8) or nbytes >= 8 * MiB:
        return None
    return "one_shot" if n == 2 or (n <= 4 and nbytes < 512 * KiB) or nbytes < 256 * KiB else "two_shot"


def _trtllm_size_rule(n: int, nbytes: float) -> str:
    """NVIDIA/TensorRT-LLM cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp@b57221b7 selectImplementation:
    one-shot on up to 2 ranks, below 1 MB on up to 4 and below 500 kB beyond, else two-shot."""
    if n <= 2:
        return "one_shot"
    return "one_shot" if nbytes < (1_000_000 if n <= 4 else 500_000) else "two_shot"


def _trtllm_rule(n: int, nbytes: float) -> str | None:
    """TensorRT-LLM (allreducePlugin.cpp@b57221b7): NCCL's ring beyond the custom workspace, 16 MB on up to 2 ranks
    and 8 MB beyond (customAllReduceUtils.h getMaxRequiredWorkspaceSize), else :func:`_trtllm_size_rule`."""
    if nbytes > (16_000_000 if n <= 2 else 8_000_000):
        return None
    return _trtllm_size_rule(n, nbytes)


def _sglang_rule(n: int, nbytes: float) -> str | None:
    """sgl-project/sglang python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@004e6561: vLLM's
    gate (2, 4, 6 or 8 ranks, under 8 MiB); its CUDA kernel is TensorRT-LLM's (sgl-kernel), chosen by TensorRT-LLM's
    size rule."""
    if n not in (2, 4, 6, 8) or nbytes >= 8 * MiB:
        return None
    return _trtllm_size_rule(n, nbytes)


@dataclass(frozen=True)
class Engine:
    """An engine's custom all-reduce: its kernel family and its rule (None: NCCL)."""

    kernel: str
    rule: Callable[[int, float], str | None]


ENGINES = {"vllm_custom": Engine("vllm", _vllm_rule), "sglang_custom": Engine("trtllm", _sglang_rule),
           "trtllm_custom": Engine("trtllm", _trtllm_rule)}


def custom_problem(placement: GroupPlacement) -> str:
    """Why no engine runs a custom all-reduce on this group ('' when one can): the kernels need the group in one
    node (one NVLink domain) and, beyond 2 ranks, NVLink between every pair (vLLM's fully_connected check)."""
    if placement.n_nodes > 1:
        return "custom all-reduce kernels run inside one node (CUDA IPC peer memory)"
    if placement.n_ranks > 2 and placement.intra_transport != "nvlink":
        return f"custom all-reduce on more than 2 GPUs needs NVLink between every pair; this group uses " \
               f"{placement.intra_transport}"
    return ""


def row_problem(placement: GroupPlacement, proto: str) -> str:
    """Why the collectives table's one_shot / two_shot row (vLLM's kernels) cannot run on this group, or ''."""
    if proto != "simple":
        return "a custom kernel has one protocol of its own (listed as simple)"
    if placement.n_ranks not in (2, 4, 6, 8):
        return f"the custom kernels run on 2, 4, 6 or 8 ranks; this group has {placement.n_ranks}"
    return custom_problem(placement)


def choose(engine: str, placement: GroupPlacement, nbytes: float) -> tuple[str, float] | None:
    """(algorithm, seconds) of ``engine``'s custom all-reduce of ``nbytes`` on ``placement``, or None where the
    engine calls NCCL (the group or the size outside its rule)."""
    spec = ENGINES[engine]
    if placement.n_ranks < 2 or custom_problem(placement):
        return None
    algorithm = spec.rule(placement.n_ranks, nbytes)
    if algorithm is None:
        return None
    return algorithm, custom_time_s(KERNELS[spec.kernel], placement, algorithm, nbytes)
