"""MoE backends as registered objects: what moves a MoE layer's tokens to their experts and back, and everything that
choice implies elsewhere. A resolved plan carries one (:attr:`simulator.plan.ResolvedPlan.moe_backend`); consumers
read its attributes and never test its name. A backend's name appears in its definition and the registries below.

- :data:`MOE_BACKENDS`: the training backends, scenario key ``moe.backend`` and ``simulator moe --backend``.
- :data:`SERVING_BACKENDS`: the serving engines' all-to-all backends, scenario key ``serving.all2all_backend``
  (vLLM's ``--all2all-backend`` names); :meth:`MoeBackend.for_phase` gives the one a prefill or decode step runs.

Adding a backend: one :class:`MoeBackend` here, registered in the dict its scenario key reads; a new kernel family
also needs its pricing function in :data:`simulator.moe.backends.KERNELS`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from simulator.errors import UserError

#: kernel families that price dispatch/combine (keys of :data:`simulator.moe.backends.KERNELS`)
ALL_TO_ALL, NORMAL, LOW_LATENCY = "all_to_all", "normal", "low_latency"
Kernel = Literal["all_to_all", "normal", "low_latency"]
#: device buffers the backend allocates on each EP rank (:mod:`simulator.memory.deepep`)
Buffers = Literal["none", "normal", "micro_batch"]


@dataclass(frozen=True)
class MoeBackend:
    """One MoE backend (module docstring).

    Attributes:
        name: its scenario / CLI name.
        kernel: the kernel family that prices dispatch and combine (:data:`simulator.moe.backends.KERNELS`);
            None when the backend is priced as collectives (``collective``) or picks another per phase.
        default_transport: ``ibrc`` (a CPU proxy thread posts the RDMA work) or ``ibgda`` (the GPU does).
        gpu_issue: whether the kernels can issue RDMA from the GPU (IBGDA).
        proxy_issue: whether they can run with a CPU proxy issuing RDMA (ibrc).
        proxy_threads: several CPU proxy threads share the work (UCCL-EP; ``MoeCoefficients.proxy_threads``).
        reserves_sms: the kernels keep ``MoeCoefficients.normal_sms`` SMs while they run.
        overlap: ``sequential`` (dispatch -> experts -> combine) or ``streamed`` by default (``CommSettings``).
        sorted_by_expert: the received rows are sorted by local expert and back (Megatron's all-to-all dispatcher).
        buffers: device buffers it holds: ``none``, DeepEP's ``normal`` buffer (sized by the EP group), or a
            low-latency buffer sized by a micro-batch's tokens (``micro_batch``).
        graph_capturable: a step that uses it can be captured in a CUDA graph (no host sync inside).
        collective: priced as an all-gather of the tokens and a reduce-scatter of the outputs on the EP group.
        priced_as: the training backend whose cost model prices it (the comm table's ``algorithm``); empty: itself.
        prefill, decode: the backends a prefill and a decode step run (``auto``); empty: itself.
        source: where the facts above come from.
    """

    name: str
    kernel: Kernel | None
    default_transport: Literal["ibrc", "ibgda"] = "ibrc"
    gpu_issue: bool = False
    proxy_issue: bool = True
    proxy_threads: bool = False
    reserves_sms: bool = False
    overlap: Literal["sequential", "streamed"] = "streamed"
    sorted_by_expert: bool = False
    buffers: Buffers = "none"
    graph_capturable: bool = True
    collective: bool = False
    priced_as: str = ""
    prefill: str = ""
    decode: str = ""
    source: str = ""

    @property
    def comm_name(self) -> str:
        """The training backend that prices its dispatch/combine (``CommSettings.backend``, comm table algorithm)."""
        return self.priced_as or self.name

    @property
    def uses_collectives_model(self) -> bool:
        """Whether dispatch/combine run on the collectives cost model of the EP group (an NCCL all-to-all)."""
        return self.kernel == ALL_TO_ALL

    @property
    def deepep_buffers(self) -> bool:
        """Whether it moves tokens through DeepEP's buffers (their bytes join NCCL's; memory/deepep.py)."""
        return self.buffers != "none"

    @property
    def buffer_per_micro_batch(self) -> bool:
        """Whether its buffer is sized by a micro-batch's tokens (so its bytes follow the micro-batch)."""
        return self.buffers == "micro_batch"

    def for_phase(self, phase: str) -> MoeBackend:
        """The backend a serving ``phase`` (``prefill``; anything else decodes) runs: itself unless it picks one
        per phase (``auto``)."""
        pick = self.prefill if phase == "prefill" else self.decode
        return SERVING_BACKENDS[pick] if pick else self

    def transport_problem(self, transport: str | None) -> str | None:
        """Why it cannot run over ``transport`` (None when it can): CPU-proxy backends cannot issue RDMA from the
        GPU, and DeepEP's low-latency kernels issue every write from the GPU (NVSHMEM IBGDA; DeepEP README), so
        they cannot run over a CPU proxy (ibrc)."""
        if transport == "ibgda" and not self.gpu_issue:
            able = _either(b.name for b in MOE_BACKENDS.values() if b.gpu_issue)
            return f"backend {self.name} issues RDMA from CPU proxy threads; transport ibgda needs {able}"
        if transport == "ibrc" and not self.proxy_issue:
            able = _either(b.name for b in MOE_BACKENDS.values() if b.proxy_issue)
            return f"backend {self.name} issues RDMA from the GPU (NVSHMEM IBGDA); transport ibrc needs {able}"
        return None


NCCL = MoeBackend(
    "nccl", ALL_TO_ALL, overlap="sequential", sorted_by_expert=True, graph_capturable=False,
    source="Megatron-LM's alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py): NCCL "
           "all-to-all of the permuted top-k copies, CPU-proxy network issue; with several local experts the "
           "received rows are sorted by expert (sort_chunks_by_idxs) and back; dropless, the per-expert counts go "
           "to the host before the exchange (a sync, so not graph-capturable)")
DEEPEP_NORMAL = MoeBackend(
    "deepep_normal", NORMAL, gpu_issue=True, reserves_sms=True, buffers="normal", graph_capturable=False,
    source="DeepEP normal kernels (deepseek-ai/DeepEP README; docs/moe.md): NVLink per rank, RDMA per node then "
           "NVLink forward, 24 SMs; ibrc by default, ibgda possible; not CUDA-graph capturable: the CPU waits for "
           "the receive counts before it allocates the output")
DEEPEP_LOW_LATENCY = MoeBackend(
    "deepep_low_latency", LOW_LATENCY, default_transport="ibgda", gpu_issue=True, proxy_issue=False,
    buffers="micro_batch",
    source="DeepEP low-latency kernels (deepseek-ai/DeepEP README; docs/moe.md): one RDMA write per (token, "
           "expert) issued from the GPU (NVSHMEM IBGDA), a hook instead of SMs, CUDA-graph compatible; the buffer "
           "holds a micro-batch's tokens (get_low_latency_rdma_size_hint)")
CPU_PROXY = MoeBackend(
    "cpu_proxy", LOW_LATENCY, proxy_threads=True,
    source="UCCL-EP: the low-latency routes issued by several CPU proxy threads instead of the GPU (docs/moe.md); "
           "graph_capturable assumed as DeepEP low-latency, whose interface it keeps")

#: ``moe.backend`` / ``simulator moe --backend``
MOE_BACKENDS: dict[str, MoeBackend] = {b.name: b for b in (NCCL, DEEPEP_NORMAL, DEEPEP_LOW_LATENCY, CPU_PROXY)}

_VLLM_A2A = "vllm/distributed/device_communicators/all2all.py"
AUTO = MoeBackend("auto", None, prefill="deepep_high_throughput", decode="deepep_low_latency",
                  source="DeepEP high-throughput for prefill and low-latency for decode (vLLM's documented pairing "
                         "for wide EP)")
NAIVE = MoeBackend("naive", None, collective=True,
                   source=f"vLLM all2all 'naive': broadcast (all-gather) of every DP rank's tokens and a "
                          f"reduce-scatter of the outputs ({_VLLM_A2A} NaiveAll2AllManager)")
ALLGATHER_REDUCESCATTER = MoeBackend(
    "allgather_reducescatter", None, collective=True,
    source="vLLM 'allgather_reducescatter': the same bytes as naive in one all-gather and one reduce-scatter")
DEEPEP_HIGH_THROUGHPUT = replace(
    DEEPEP_NORMAL, name="deepep_high_throughput", priced_as=DEEPEP_NORMAL.name,
    source="DeepEP normal kernels (docs/moe.md); not CUDA-graph capturable: the CPU waits for the receive counts "
           "before it allocates the output (DeepEP README, normal kernels; vLLM runs them eagerly)")
PPLX = replace(DEEPEP_LOW_LATENCY, name="pplx", priced_as=DEEPEP_LOW_LATENCY.name, buffers="none",
               source="pplx-kernels (perplexityai/pplx-kernels): NVSHMEM per-token writes like DeepEP low-latency; "
                      "assumed the same cost model (no per-size comparison published)")

#: ``serving.all2all_backend`` (vLLM's ``--all2all-backend``); the first is the default
SERVING_BACKENDS: dict[str, MoeBackend] = {b.name: b for b in (
    AUTO, NAIVE, ALLGATHER_REDUCESCATTER, DEEPEP_HIGH_THROUGHPUT, DEEPEP_LOW_LATENCY, PPLX)}


def moe_backend(backend: str | MoeBackend, key_path: str = "moe.backend") -> MoeBackend:
    """The training backend named ``backend`` (an object passes through); UserError at ``key_path`` naming the
    accepted ones."""
    return _lookup(MOE_BACKENDS, backend, key_path)


def serving_backend(backend: str | MoeBackend, key_path: str = "serving.all2all_backend") -> MoeBackend:
    """The serving engine backend named ``backend`` (an object passes through)."""
    return _lookup(SERVING_BACKENDS, backend, key_path)


def _either(names) -> str:
    """``a, b or c``."""
    names = list(names)
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _lookup(registry: dict[str, MoeBackend], backend: str | MoeBackend, key_path: str) -> MoeBackend:
    if isinstance(backend, MoeBackend):
        return backend
    found = registry.get(backend)
    if found is None:
        raise UserError(f"unknown MoE backend {backend!r} (accepted: {', '.join(registry)})", key_path=key_path)
    return found
