"""The frozen result of :func:`simulator.schedule.simulate_step` and its docs/interface.md dictionary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.schedule.timeline import StageTimeline
from simulator.traffic import DIMS


@dataclass(frozen=True)
class CommRow:
    """One comm op of the critical stage per step: ``count`` calls of ``bytes`` each (nccl-tests convention),
    ``call_s`` per call, ``time_s`` = count x call_s (busy time, hidden or not)."""

    dim: str
    op: str
    name: str
    bytes: float
    count: int
    algorithm: str
    link: str
    call_s: float

    @property
    def time_s(self) -> float:
        return self.count * self.call_s

    def to_dict(self) -> dict:
        return {"dim": self.dim, "op": self.op, "bytes": self.bytes, "count": self.count, "algorithm": self.algorithm,
                "link": self.link, "time_s": self.time_s, "call_s": self.call_s, "name": self.name}


@dataclass(frozen=True)
class TraceEvent:
    """One bar of the trace: ``stage`` (process), ``stream`` (thread), name, start and duration in seconds."""

    stage: int
    stream: str
    name: str
    start_s: float
    dur_s: float


@dataclass(frozen=True)
class StepResult:
    """Step time, its breakdown on the critical stage, throughput and the comm table (docs/step_time.md)."""

    step_s: float
    compute_s: float
    recompute_s: float
    bubble_s: float
    optimizer_s: float
    exposed_comm_s: dict[str, float]
    tokens_per_s: float
    model_flops_per_gpu: float
    hardware_flops_per_gpu: float
    peak_flops: float
    comm: tuple[CommRow, ...]
    critical_stage: int
    """The stage that sets the pace: the busiest (its ops, exposed comm and tail take the most time)."""
    stage_end_s: tuple[float, ...]
    stage_busy_s: tuple[float, ...]
    timelines: tuple[StageTimeline, ...]
    chunk_comm_s: tuple[tuple[tuple[dict[str, float], dict[str, float]], ...], ...]
    tail_events: tuple[TraceEvent, ...]
    p2p_s: float
    moe: dict | None = None
    host_s: float = 0.0
    """Seconds the critical stage's GPU waits for the host to issue kernels (eager frameworks)."""
    offload_s: float = 0.0
    """Exposed host-link copies of offload on the critical stage (docs/offload.md); the CPU optimizer step is in
    ``optimizer_s``."""
    replay: Callable[[], list[StageTimeline]] | None = field(default=None, repr=False, compare=False)
    """The event replay of the step's pipeline (every op with its start and end), run on demand by
    :meth:`op_timelines` where :attr:`timelines` came from an evaluator without an op list."""

    def op_timelines(self) -> tuple[StageTimeline, ...]:
        """Every stage's timeline with its ops (:attr:`timelines` if they have them, else the replay's)."""
        if self.replay is None or any(tl.ops for tl in self.timelines):
            return self.timelines
        return tuple(self.replay())

    @property
    def parts(self) -> list[tuple[str, float]]:
        """The critical stage's breakdown, the one list every report reads: ``compute``, ``recompute``, ``bubble``,
        ``optimizer``, ``host``, ``offload`` and ``exposed <dim>`` per dimension, in seconds; they add up to the step
        time."""
        return [("compute", self.compute_s), ("recompute", self.recompute_s), ("bubble", self.bubble_s),
                ("optimizer", self.optimizer_s), ("host", self.host_s), ("offload", self.offload_s),
                *((f"exposed {d}", v) for d, v in self.exposed_comm_s.items())]

    @property
    def bottleneck(self) -> dict:
        """The stage that sets the step and its largest part (a name of :attr:`parts`: the resource to relieve
        first), with every stage's busy seconds."""
        parts = dict(self.parts)
        resource = max(parts, key=parts.get)
        return {"stage": self.critical_stage, "resource": resource, "share": parts[resource] / self.step_s,
                "stage_busy_s": list(self.stage_busy_s)}

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops_per_gpu / self.step_s / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return self.hardware_flops_per_gpu / self.step_s / 1e12

    @property
    def mfu(self) -> float:
        return self.model_flops_per_gpu / self.step_s / self.peak_flops

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_gpu / self.step_s / self.peak_flops

    def to_dict(self) -> dict:
        """docs/interface.md ``time``, ``throughput`` and ``comm`` sections."""
        return {
            "time": {"step_s": self.step_s,
                     "breakdown_s": {"compute": self.compute_s, "recompute": self.recompute_s,
                                     "bubble": self.bubble_s, "optimizer": self.optimizer_s,
                                     "host": self.host_s, "offload": self.offload_s,
                                     "exposed_comm": {d: self.exposed_comm_s[d] for d in DIMS}},
                     "bottleneck": self.bottleneck},
            "throughput": {"tokens_per_s": self.tokens_per_s, "model_tflops_per_gpu": self.model_tflops_per_gpu,
                           "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu, "mfu": self.mfu,
                           "hfu": self.hfu},
            "comm": [r.to_dict() for r in self.comm],
            **({"moe": dict(self.moe)} if self.moe is not None else {}),
        }

    def events(self) -> list[TraceEvent]:
        """Timeline bars for the trace: compute ops per stage, the comm busy time inside each op per dimension,
        pipeline transfers, and the step's tail (DP reduction, optimizer, parameter gather)."""
        out: list[TraceEvent] = []
        timelines = self.op_timelines()
        for stage, tl in enumerate(timelines):
            for kind, mb, chunk, start, end in tl.ops:   # kind F, B, or W (a deferred weight gradient)
                label = f"{ {'F': 'fwd', 'W': 'wgrad'}.get(kind, 'bwd')} mb{mb}" + (f" chunk{chunk}" if len(
                    self.chunk_comm_s[stage]) > 1 or chunk else "")
                out.append(TraceEvent(stage, "compute", label, start, end - start))
                if kind == "W":
                    continue
                # dual schedules: one per-micro-batch cost per rank for both phases
                comm = self.chunk_comm_s[stage][min(chunk, len(self.chunk_comm_s[stage]) - 1)][0 if kind == "F" else 1]
                for dim, t in comm.items():     # the comm busy time per dim, and the GPU's wait for the host
                    if t > 0:
                        stream, name = ("host", f"host issue wait {label}") if dim == "host" else (
                            f"{dim} comm", f"{dim} {label}")
                        out.append(TraceEvent(stage, stream, name, start, t))
                send = (kind == "F" and stage < len(timelines) - 1) or (kind == "B" and stage > 0)
                if send and self.p2p_s > 0:
                    out.append(TraceEvent(stage, "pp comm", f"send {label}", end, self.p2p_s))
        return out + list(self.tail_events)
