"""What a Kineto trace says about a framework's implementation: per phase (forward, backward, optimizer) the
kernels, launches and their host issue time, the GPU's idle time spent waiting for the host, the device-to-host
synchronisations; the repeating per-layer kernel block; the GEMMs with their shapes and times. Pure functions of a
:class:`~simulator.implementation.kineto.KinetoTrace`; seconds throughout. Definitions are in docs/trace_calibration.md.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from simulator.implementation.kineto import DeviceEvent, HostEvent, KinetoTrace

PHASES = ("forward", "backward", "optimizer")
#: host calls that block until the GPU (a stream, an event or the device) has drained
SYNC_CALLS = {"cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream", "cudaDeviceSynchronize": "device",
              "cuCtxSynchronize": "device", "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
              "cudaMemcpy": "memcpy"}
#: ATen operators whose kernels are one GEMM, and where the two operands' dims are in ``Input Dims``
GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2),
            "aten::_scaled_mm": (0, 1)}
DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "c10::Float8_e4m3fn": "fp8"}
#: longest kernel block searched for as a layer's period (kernels of one transformer layer's pass: a few hundred in
#: eager mode); bounds the search to MAX_PERIOD passes over the sequence, linear in the trace
MAX_PERIOD = 4096
#: a launch call longer than this many times the trace's median launch call waited (CUDA blocks a launch while the
#: launch queue is full): launch calls take 5-10 us (median) in the H200 traces of
#: simulator/validation/data/h200_traces/, a blocked one as long as a kernel runs
BLOCKED_LAUNCH = 5.0
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")


@dataclass(frozen=True)
class PhaseStats:
    """One phase of the profiled steps, summed over the steps (divide by ``TraceStats.steps`` for one step)."""

    name: str
    kernels: int                 # device kernels (memcpy / memset apart)
    memcpy: int
    memset: int
    launches: int                # host calls that started device work (kernels, copies, sets)
    kernel_s: float              # sum of kernel durations
    gpu_busy_s: float            # union of device activity
    gpu_idle_s: float            # idle time inside the phase's device span
    host_bound_idle_s: float     # of which the next device op's launch call ended after the GPU went idle
    issue_s: float               # sum of launch-to-launch spacings with no synchronisation between them
    issue_gaps: int              # spacings summed in issue_s
    issue_events: int            # host events the profiler recorded inside those spacings (operators, API calls)
    syncs: dict                  # SYNC_CALLS kind -> count
    dtoh_copies: int
    sequence: tuple[str, ...]    # kernel names in launch order

    @property
    def issue_per_launch_s(self) -> float | None:
        return self.issue_s / self.issue_gaps if self.issue_gaps else None


@dataclass(frozen=True)
class Period:
    """A kernel block that repeats ``layers`` times in a row (the layers), ``kernels_per_layer`` long."""

    kernels_per_layer: int
    layers: int
    first: int                   # index of the first kernel of the repeated stretch
    outside: int                 # kernels of the phase outside the repeated stretch


@dataclass(frozen=True)
class GemmRecord:
    """One GEMM operator: C[m, n] = A[m, k] B[k, n] (``batch`` of them), its kernels' total time."""

    op: str
    phase: str
    dtype: str
    batch: int
    m: int
    k: int
    n: int
    time_s: float

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n


@dataclass(frozen=True)
class TraceStats:
    file: str
    sha256: str
    gpu_name: str
    gpu_sms: int | None
    gpu_memory_bytes: int | None
    steps: int
    launch: str                  # eager | compile | cuda_graphs
    phases: dict                 # name -> PhaseStats
    periods: dict                # forward/backward -> Period | None
    gemms: tuple[GemmRecord, ...]
    optimizer_impl: str          # fused | foreach | for_loop | none
    optimizer_kernel_names: tuple[str, ...]
    attention_shapes: tuple      # (batch, heads, seq, head_dim) of each aten::scaled_dot_product_attention call
    attention_s: float           # fused attention kernels' time (names with sdpa / fmha / flash), forward + backward
    sync_host_s: float | None    # median host time of a sync after the GPU drained
    step_gpu_busy_s: float       # per step
    step_gpu_span_s: float       # per step: first device op start to last end


def trace_stats(trace: KinetoTrace) -> TraceStats:
    """Everything ``simulator calibrate --trace`` reads from ``trace`` (see the module docstring)."""
    by_corr = {e.correlation: e for e in trace.device_events if e.correlation is not None}
    launches = [r for r in trace.runtime if r.correlation in by_corr]
    syncs = [r for r in trace.runtime if r.name in SYNC_CALLS]
    classify = _Classifier(trace)
    phase_of_corr = {r.correlation: classify(r) for r in launches}
    host_starts = defaultdict(list)
    for e in (*trace.cpu_ops, *trace.runtime):
        host_starts[e.tid].append(e.start_s)
    for starts in host_starts.values():
        starts.sort()
    phases = {}
    for name in PHASES:
        mine = [r for r in launches if phase_of_corr[r.correlation] == name]
        events = [by_corr[r.correlation] for r in mine]
        phases[name] = _phase(name, mine, events, [s for s in syncs if classify(s) == name], host_starts)
    periods = {p: find_period(phases[p].sequence) for p in ("forward", "backward")}
    opt_names = Counter(e.name for r in launches if phase_of_corr[r.correlation] == "optimizer"
                        for e in [by_corr[r.correlation]] if e.kind == "kernel")
    busy, span = _busy(trace.device_events)
    steps = classify.steps
    return TraceStats(trace.file, trace.sha256, trace.device.name, trace.device.sms, trace.device.total_memory_bytes, steps,
                      _launch_mode(trace), phases, periods, _gemms(trace, phase_of_corr, by_corr),
                      _optimizer_impl(opt_names), tuple(n for n, _ in opt_names.most_common(3)),
                      _attention_shapes(trace), sum(k.dur_s for k in trace.kernels if _is_attention(k.name)),
                      _sync_host_s(syncs, trace.device_events), busy / steps, span / steps)


class _Classifier:
    """Phase of a host call: ``optimizer`` inside an ``Optimizer.step#`` / ``Optimizer.zero_grad#`` annotation,
    ``backward`` inside an autograd ``evaluate_function`` operator (or on the autograd engine's own thread),
    ``forward`` otherwise (the loss included)."""

    def __init__(self, trace: KinetoTrace) -> None:
        self.optimizer = _Intervals(a for a in trace.annotations if a.name.startswith(OPTIMIZER_PREFIXES))
        backward = [op for op in trace.cpu_ops if op.name.startswith(BACKWARD_OP_PREFIX)]
        self.backward = _Intervals(backward)
        main = Counter(a.tid for a in trace.annotations if a.name.startswith(OPTIMIZER_PREFIXES) or
                       a.name.startswith("ProfilerStep#"))
        self.engine_tids = {op.tid for op in backward} - set(main)
        profiler_steps = sum(a.name.startswith("ProfilerStep#") for a in trace.annotations)
        optimizer_steps = sum(a.name.startswith("Optimizer.step#") for a in trace.annotations)
        self.steps = profiler_steps or optimizer_steps or 1

    def __call__(self, call: HostEvent) -> str:
        if self.optimizer.contains(call.tid, call.start_s):
            return "optimizer"
        if call.tid in self.engine_tids or self.backward.contains(call.tid, call.start_s):
            return "backward"
        return "forward"


class _Intervals:
    """Union of host ranges per thread, asked whether a time falls inside (bisection)."""

    def __init__(self, events) -> None:
        spans = defaultdict(list)
        for e in events:
            spans[e.tid].append((e.start_s, e.end_s))
        self.merged = {tid: _merge(s) for tid, s in spans.items()}
        self.starts = {tid: [a for a, _ in m] for tid, m in self.merged.items()}

    def contains(self, tid, t: float) -> bool:
        starts = self.starts.get(tid)
        if not starts:
            return False
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t <= self.merged[tid][i][1]


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _busy(events) -> tuple[float, float]:
    """(union of the events' intervals, first start to last end), seconds."""
    merged = _merge([(e.start_s, e.end_s) for e in events])
    if not merged:
        return 0.0, 0.0
    return sum(b - a for a, b in merged), merged[-1][1] - merged[0][0]


def _phase(name: str, launches: list[HostEvent], events: list[DeviceEvent], syncs: list[HostEvent],
           host_starts: dict) -> PhaseStats:
    kinds = Counter(e.kind for e in events)
    busy, span = _busy(events)
    launch_end = {r.correlation: r.end_s for r in launches}
    merged = _merge([(e.start_s, e.end_s) for e in events])
    host_bound = 0.0
    ordered = sorted(events, key=lambda e: e.start_s)
    starts = [e.start_s for e in ordered]
    for (_, idle_from), (idle_to, _) in zip(merged, merged[1:], strict=False):
        nxt = ordered[bisect.bisect_left(starts, idle_to)]
        if launch_end.get(nxt.correlation, idle_to) > idle_from:
            host_bound += idle_to - idle_from
    issue_s, gaps, recorded = _issue(launches, syncs, host_starts)
    kernels = sorted((e for e in events if e.kind == "kernel"), key=lambda e: e.correlation or 0)
    dtoh = sum(1 for e in events if e.kind == "memcpy" and ("DtoH" in e.name or "Device -> P" in e.name))
    return PhaseStats(name, kinds["kernel"], kinds["memcpy"], kinds["memset"], len(launches),
                      sum(e.dur_s for e in events if e.kind == "kernel"), busy, span - busy, host_bound, issue_s,
                      gaps, recorded, dict(Counter(SYNC_CALLS[s.name] for s in syncs)), dtoh, tuple(e.name for e in kernels))


def _issue(launches: list[HostEvent], syncs: list[HostEvent], host_starts: dict) -> tuple[float, int, int]:
    """Sum and count of the spacings between consecutive launch calls of a thread that no synchronisation call
    interrupts and whose first call did not wait (a call over BLOCKED_LAUNCH x the median launch call waited for a
    slot in a full launch queue: the spacing is then GPU time), i.e. the host's issue time per launch while it runs
    ahead of, or keeps up with, the GPU; and the host
    events the profiler recorded in them (``host_starts``: thread -> sorted start times of its operators and API
    calls; the profiler's own cost grows with them)."""
    total, count, recorded = 0.0, 0, 0
    by_tid = defaultdict(list)
    longest = BLOCKED_LAUNCH * statistics.median(r.dur_s for r in launches) if launches else 0.0
    for r in launches:
        by_tid[r.tid].append((r.start_s, r.dur_s))
    sync_starts = defaultdict(list)
    for s in syncs:
        sync_starts[s.tid].append(s.start_s)
    for tid, starts in by_tid.items():
        starts.sort()
        blocked = sorted(sync_starts.get(tid, ()))
        for (a, call), (b, _) in zip(starts, starts[1:], strict=False):
            i = bisect.bisect_left(blocked, a)
            if (i < len(blocked) and blocked[i] < b) or call > longest:
                continue
            total += b - a
            count += 1
            mine = host_starts.get(tid, ())
            recorded += bisect.bisect_left(mine, b) - bisect.bisect_left(mine, a)
    return total, count, recorded


def find_period(sequence: tuple[str, ...]) -> Period | None:
    """The block of kernels that repeats back to back over the longest stretch of ``sequence`` (the layers): for
    each candidate length p (1 to MAX_PERIOD), the longest run of i with sequence[i] == sequence[i + p]; a run of
    r covers r + p kernels in (r + p) // p repeats. The p covering most wins, the shortest on ties (2p covers the
    same stretch as p). None when no block repeats at least twice and covers more kernels than one repeat of a
    single kernel name would."""
    n = len(sequence)
    if n < 4:
        return None
    ids = np.unique(np.array(sequence, dtype=object).astype(str), return_inverse=True)[1]
    best: tuple[int, int, int] | None = None          # (coverage, p, first)
    for p in range(1, min(n // 2, MAX_PERIOD) + 1):
        run, first = _longest_true_run(ids[:-p] == ids[p:])
        if run < p:
            continue
        coverage = (run + p) // p * p
        if best is None or coverage > best[0]:
            best = (coverage, p, first)
    if best is None or best[1] < 2:
        return None
    coverage, p, first = best
    return Period(p, coverage // p, first, n - coverage)


def _longest_true_run(mask: np.ndarray) -> tuple[int, int]:
    """(length, start) of the longest run of True in ``mask``."""
    if not mask.any():
        return 0, 0
    padded = np.concatenate(([0], mask.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[::2], edges[1::2]
    i = int(np.argmax(ends - starts))
    return int(ends[i] - starts[i]), int(starts[i])


def _gemms(trace: KinetoTrace, phase_of_corr: dict, by_corr: dict) -> tuple[GemmRecord, ...]:
    """GEMM operators with recorded shapes (``record_shapes=True``), each with the total time of the kernels that
    carry its ``External id`` and the phase its first kernel's launch falls in."""
    ops = {}
    for op in trace.cpu_ops:
        if op.name in GEMM_OPS and op.external_id is not None:
            ops[op.external_id] = None if op.external_id in ops else op   # an id on two operators: skip it
    time = defaultdict(float)
    phase = {}
    for corr, e in by_corr.items():
        if e.kind == "kernel" and ops.get(e.external_id) is not None:
            time[e.external_id] += e.dur_s
            phase.setdefault(e.external_id, phase_of_corr.get(corr, "forward"))
    out = []
    for ext, op in ops.items():
        shape = _gemm_shape(op) if op is not None and ext in time else None
        if shape is not None:
            out.append(GemmRecord(op.name, phase[ext], *shape, time[ext]))
    return tuple(out)


def _gemm_shape(op: HostEvent) -> tuple[str, int, int, int, int] | None:
    """(dtype, batch, m, k, n) from an operator's input dims and types; None where they were not recorded."""
    ia, ib = GEMM_OPS[op.name]
    dims = op.input_dims
    if len(dims) <= ib or not all(isinstance(d, list) and len(d) in (2, 3) for d in (dims[ia], dims[ib])):
        return None
    a, b = dims[ia], dims[ib]
    if len(a) != len(b) or not all(isinstance(x, int) and x > 0 for x in (*a, *b)):
        return None
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    if b[-2] != k:
        return None
    types = op.input_types
    dtype = DTYPES.get(types[ia], str(types[ia])) if len(types) > ia else "unknown"
    return dtype, batch, m, k, n


#: kernel-name words of fused attention kernels (cuDNN's sdpa / fmha, FlashAttention's flash_fwd / flash_bwd)
ATTENTION_WORDS = ("sdpa", "fmha", "flash")


def _is_attention(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in ATTENTION_WORDS)


def _attention_shapes(trace: KinetoTrace) -> tuple:
    """(batch, heads, seq, head_dim) of the query of each SDPA call (``record_shapes=True``)."""
    out = []
    for op in trace.cpu_ops:
        if op.name == "aten::scaled_dot_product_attention" and op.input_dims:
            q = op.input_dims[0]
            if isinstance(q, list) and len(q) == 4 and all(isinstance(x, int) and x > 0 for x in q):
                out.append(tuple(q))
    return tuple(out)


def _launch_mode(trace: KinetoTrace) -> str:
    if any(r.name in ("cudaGraphLaunch", "cuGraphLaunch") for r in trace.runtime):
        return "cuda_graphs"
    kernels = trace.kernels
    triton = sum(k.name.startswith("triton_") for k in kernels)
    return "compile" if triton > 0.3 * len(kernels) else "eager"


def _optimizer_impl(names: Counter) -> str:
    """fused (a fused Adam kernel), foreach (multi-tensor kernels), for_loop (per-tensor kernels), none."""
    if not names:
        return "none"
    joined = " ".join(names).lower()
    if "fused" in joined and "adam" in joined:
        return "fused"
    if "multi_tensor_apply" in joined:
        return "foreach"
    return "for_loop"


def _sync_host_s(syncs: list[HostEvent], events: tuple[DeviceEvent, ...]) -> float | None:
    """Median host time a synchronisation call takes after the GPU work queued before it has drained: call end
    minus the later of the call's start and the end of the last device op that started before the call ended."""
    if not syncs:
        return None
    starts = [e.start_s for e in events]
    ends = np.maximum.accumulate(np.array([e.end_s for e in events]))
    own = []
    for s in syncs:
        i = bisect.bisect_right(starts, s.end_s) - 1
        drained = min(float(ends[i]), s.end_s) if i >= 0 else s.start_s
        own.append(s.end_s - max(s.start_s, drained))
    return statistics.median(own)
