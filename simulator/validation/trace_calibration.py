"""``simulator calibrate --trace``: an implementation profile (the implementation-profile schema) and a GEMM
efficiency override from a PyTorch profiler (Kineto) trace of the user's own run (docs/trace_calibration.md).

The trace's GPU is matched to a GPU profile (a trace of another GPU than the one asked for exits 2 naming both);
its statistics (:func:`simulator.implementation.trace_stats.trace_stats`) become the profile's ``launch``, ``host``,
``kernels``, ``syncs`` and ``optimizer`` fields, each with a ``sources`` entry naming the trace file and its sha256;
its GEMMs (shapes from ``record_shapes=True``) pin the peak fraction of their dtype in the GPU architecture's
efficiency table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simulator.compute import ComputeEfficiency, GemmRow, default_efficiency, fit_peak_fraction
from simulator.compute.fit import predict
from simulator.compute.gemm import peak_flops
from simulator.errors import UserError
from simulator.hardware import GpuSpec, list_profiles, load_gpu
from simulator.implementation.kineto import Device, read_trace
from simulator.implementation.trace_stats import TraceStats, trace_stats
from simulator.schedule import simulate_step
from simulator.topology import topology_of

#: a trace's totalGlobalMem may differ from a profile's driver-reported capacity by this fraction at most (the
#: driver reserves a little; H200: 150,011,871,232 in a Kineto trace vs 143,771 MiB = 150,754,820,096 from nvidia-smi)
MEMORY_MATCH = 0.10


#: sync kinds (trace_stats.SYNC_CALLS) left out of the profile's ``syncs``: torch.cuda.synchronize() is what a timing
#: harness calls between phases (the H200 traces of simulator/validation/data/h200_traces/ have 5 per step and no
#: other sync); a framework's own syncs are stream syncs (``.item()``, ``.cpu()``, ``nonzero``) and blocking copies
HARNESS_SYNCS = ("device",)


@dataclass(frozen=True)
class TraceCalibration:
    """What ``calibrate --trace`` found and writes."""

    stats: TraceStats
    gpu: GpuSpec
    profile: dict                      # the implementation profile, as YAML-ready data
    efficiency: ComputeEfficiency | None   # the architecture's table with the fitted peak fraction
    gemm_dtype: str | None
    gemm_measured_s: float
    gemm_model_before_s: float         # the shipped table's time for the same GEMMs
    clamped: bool
    attention_dim: int | None = None   # the head dim whose SDPA efficiency was fitted


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def gpu_matches(gpu: GpuSpec, device: Device) -> bool:
    """True when ``device`` (a trace's deviceProperties) is the GPU ``gpu`` describes: the profile name's model
    token (``h200`` of ``h200_sxm``) is a word of the device name, and the SM count and memory agree where the trace
    gives them."""
    model = gpu.name.split("_")[0].lower()
    if model not in _tokens(device.name):
        return False
    if device.sms is not None and device.sms != gpu.sms:
        return False
    cap = float(gpu.memory.capacity)
    return device.total_memory_bytes is None or abs(device.total_memory_bytes - cap) <= MEMORY_MATCH * cap


def gpu_for_trace(device: Device, file: str, expected: GpuSpec | None = None) -> GpuSpec:
    """The GPU profile of the trace's device: ``expected`` when it matches (else exit 2 naming both), or the best
    matching shipped profile (most name words in common)."""
    described = f"{device.name!r} ({device.sms} SMs, {device.total_memory_bytes} bytes)"
    if expected is not None:
        if not gpu_matches(expected, device):
            raise UserError(f"the trace was recorded on {described}, not on the system's GPU {expected.name} "
                            f"({expected.sms} SMs): calibrate on a trace of the GPU you simulate", file=file,
                            key_path="deviceProperties")
        return expected
    words = _tokens(device.name)
    found = [g for g in map(load_gpu, list_profiles("gpus")) if gpu_matches(g, device)]
    if not found:
        raise UserError(f"no GPU profile matches the trace's {described} (simulator hardware list; add one, "
                        "docs/architecture.md 'A GPU')", file=file, key_path="deviceProperties")
    return max(found, key=lambda g: (len(words & set(g.name.lower().split("_"))), -abs(
        (device.total_memory_bytes or 0) - g.memory.capacity)))


def calibrate_trace(path: str | Path, name: str, expected_gpu: GpuSpec | None = None,
                    base: str = "pytorch", profiler_event_s: float = 0.0, scenario=None) -> TraceCalibration:
    """Read ``path`` and derive the profile ``name`` (inheriting unset fields from ``base``) and the efficiency
    override; ``profiler_event_s`` (s) is taken off the host issue time per host event the profiler recorded
    (docs/trace_calibration.md: 2-4 us on the H200 machine); see the module docstring."""
    trace = read_trace(path)
    stats = trace_stats(trace)
    gpu = gpu_for_trace(trace.device, trace.file, expected_gpu)
    start = default_efficiency(gpu.architecture)
    rows = [GemmRow(g.dtype, g.m, g.k, g.n, g.time_s) for g in stats.gemms
            if g.batch == 1 and g.time_s > 0 and g.dtype in start.peak_fraction]
    dtype = max({r.dtype for r in rows}, key=lambda d: sum(r.time_s for r in rows if r.dtype == d), default=None)
    efficiency, clamped, measured, before = None, False, 0.0, 0.0
    if dtype is not None:
        mine = [r for r in rows if r.dtype == dtype]
        measured = sum(r.time_s for r in mine)
        before = float(predict(mine, gpu, start).sum())
        efficiency, clamped = fit_peak_fraction(rows, gpu, start, dtype, source=(
            f"{start.source}; peak_fraction.{dtype} fitted by simulator calibrate --trace to {len(mine)} {dtype} "
            f"GEMMs of {_cite(stats)} (model total time = measured {measured * 1e3:.3f} ms)"))
    attention_dim = None
    if efficiency is not None:
        efficiency, attention_dim = fit_sdpa(stats, gpu, efficiency)
        if scenario is not None:
            efficiency = fit_memory_efficiency(scenario, efficiency, stats)
    return TraceCalibration(stats, gpu, build_profile(stats, name, base, profiler_event_s), efficiency, dtype,
                            measured, before, clamped, attention_dim)


def fit_sdpa(stats: TraceStats, gpu: GpuSpec, eff: ComputeEfficiency) -> tuple[ComputeEfficiency, int | None]:
    """``eff`` with ``sdpa_by_head_dim[d]`` set so that the model prices the trace's SDPA calls (one head dim d) in
    the time its fused attention kernels took: the model's causal SDPA costs 6 b h s^2 d FLOPs forward + backward
    (simulator.model.flops._core_attention: two score GEMMs forward, four backward, each b h s^2 d under the causal
    half) at e(d) x s / (s + sdpa_half_seq) of the bf16 peak plus two launches, so
    e(d) = sum 6 b h s^2 d (s + half) / s / (peak x (T - 2 n launch)) in closed form. Unchanged (None) where the
    trace has no SDPA shapes, several head dims or no attention kernels."""
    shapes = stats.attention_shapes
    dims = {q[3] for q in shapes}
    time = stats.attention_s - 2 * eff.launch_s * len(shapes)
    if len(dims) != 1 or time <= 0:
        return eff, None
    d = dims.pop()
    half = eff.sdpa_half_seq
    need = sum(6.0 * b * h * s * s * dd * (s + half) / s for b, h, s, dd in shapes) / peak_flops(gpu, "bf16")
    table = {**(eff.sdpa_by_head_dim or {}), d: min(need / time, 1.0)}
    return eff.model_copy(update={"sdpa_by_head_dim": table,
                                  "source": f"{eff.source}; sdpa_by_head_dim.{d} fitted to {len(shapes)} SDPA calls "
                                            f"({time * 1e3:.3f} ms of attention kernels)"}), d


def _step(scenario, efficiency: ComputeEfficiency | None = None):
    return simulate_step(scenario.model, scenario.plan, topology_of(scenario.cluster), efficiency=efficiency,
                         moe=scenario.moe, gpu_speed_sigma=scenario.system.gpu_speed_sigma)


def step_gpu_s(scenario, efficiency: ComputeEfficiency | None = None) -> float:
    """The model's training step of a loaded scenario (as simulator.entries.simulate prices it), with an optional
    efficiency table in place of the shipped one."""
    return _step(scenario, efficiency).step_s


def fit_memory_efficiency(scenario, eff: ComputeEfficiency, stats: TraceStats) -> ComputeEfficiency:
    """``eff`` with the optimizer's and the other memory-bound kernels' efficiencies fitted to the traced run
    (``scenario``: its model, plan, batch and GPU). ``optimizer_efficiency`` in closed form: the model's optimizer
    time is bytes / (bandwidth x efficiency), so efficiency x model time / measured time matches the trace's
    optimizer-phase GPU busy time. ``memory_efficiency`` by bisection on [0.02, 1] (30 halvings; clamped at the
    bounds) so that the model's step less its optimizer equals the trace's GPU busy time less the optimizer phase's:
    the memory-bound kernels take what GEMMs and attention leave (HF's unfused norms, rotary, SiLU and fp32 loss are
    more such kernels than the model's op list has)."""
    steps = stats.steps
    opt_measured = stats.phases["optimizer"].gpu_busy_s / steps
    opt_model = _step(scenario, eff).optimizer_s
    if opt_measured > 0 and opt_model > 0:
        current = eff.optimizer_efficiency or eff.memory_efficiency
        eff = eff.model_copy(update={"optimizer_efficiency": min(current * opt_model / opt_measured, 1.0)})
    target = stats.step_gpu_busy_s - opt_measured
    lo, hi = 0.02, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        step = _step(scenario, eff.model_copy(update={"memory_efficiency": mid}))
        if step.step_s - step.optimizer_s > target:
            lo = mid
        else:
            hi = mid
    return eff.model_copy(update={"memory_efficiency": 0.5 * (lo + hi), "source": (
        f"{eff.source}; optimizer_efficiency fitted to the trace's optimizer kernels ({opt_measured * 1e3:.3f} ms) "
        f"and memory_efficiency so the scenario's step less its optimizer equals the trace's GPU busy time less the "
        f"optimizer phase ({target * 1e3:.3f} ms)")})


def _cite(stats: TraceStats) -> str:
    return f"{Path(stats.file).name} (sha256 {stats.sha256})"


def build_profile(stats: TraceStats, name: str, base: str = "pytorch", profiler_event_s: float = 0.0) -> dict:
    """The implementation-profile fields a trace pins down, each with its source (per micro-batch and step:
    the trace's totals divided by its steps)."""
    cite, steps = _cite(stats), stats.steps
    phases = stats.phases.values()
    gaps = sum(p.issue_gaps for p in phases)
    syncs = sum(n for p in phases for kind, n in p.syncs.items() if kind not in HARNESS_SYNCS)
    profile: dict = {"name": name, "label": f"calibrated from {Path(stats.file).name} on {stats.gpu_name} "
                     f"({steps} step{'s' if steps > 1 else ''})", "base": base, "family": "pytorch",
                     "version": "trace", "launch": stats.launch}
    sources = {"launch": f"{cite}: {_launch_why(stats.launch)}"}
    host: dict = {}
    if gaps:
        recorded = sum(p.issue_events for p in phases)
        issue = sum(p.issue_s for p in phases) - profiler_event_s * recorded
        if issue <= 0:
            raise UserError(f"--profiler-event-time {profiler_event_s * 1e6:g} us x {recorded:,} recorded host "
                            f"events is more than the {sum(p.issue_s for p in phases) * 1e3:.3f} ms of host issue "
                            "time in the trace", file=stats.file)
        launches, kernels = sum(p.launches for p in phases), sum(p.kernels for p in phases)
        host["per_kernel_s"] = _sig(issue / gaps * launches / kernels)
        overhead = (f"less {profiler_event_s * 1e6:g} us for each of the {recorded:,} host events the profiler "
                    "recorded in them" if profiler_event_s else "profiler overhead included")
        sources["host.per_kernel_s"] = (f"{cite}: mean spacing of {gaps} consecutive launch calls with no "
                                        f"synchronisation between them and no wait for the launch queue "
                                        f"({overhead}), times {launches} launches (kernels, copies, sets) per "
                                        f"{kernels} kernels: the host issue time per kernel")
    if stats.sync_host_s is not None:
        host["per_sync_s"] = _sig(stats.sync_host_s)
        sources["host.per_sync_s"] = f"{cite}: median host time of the sync calls after the GPU drained"
    if host:
        profile["host"] = host
    kernels, outside = {}, 0
    for phase, key in (("forward", "dense_forward"), ("backward", "dense_backward")):
        period = stats.periods.get(phase)
        total = stats.phases[phase].kernels
        if period is not None and period.layers >= 2:
            kernels[key] = period.kernels_per_layer
            outside += total - period.kernels_per_layer * period.layers
            sources[f"kernels.{key}"] = (f"{cite}: {phase} kernel block of {period.kernels_per_layer} repeated "
                                         f"{period.layers} times back to back (the layers)")
        else:
            outside += total
    kernels["per_step"] = round(outside / steps)
    sources["kernels.per_step"] = f"{cite}: forward + backward kernels outside the repeated layer blocks, per step"
    profile["kernels"] = kernels
    profile["syncs"] = {"per_step": round(syncs / steps)}
    sources["syncs.per_step"] = (f"{cite}: {_sync_kinds(stats)} in {steps} step(s); device-wide ones "
                                 "(cudaDeviceSynchronize: torch.cuda.synchronize of a timing harness) not counted")
    if stats.optimizer_impl != "none":
        profile["optimizer"] = {"impl": stats.optimizer_impl}
        sources["optimizer.impl"] = f"{cite}: optimizer kernels {', '.join(stats.optimizer_kernel_names)[:200]}"
    profile["sources"] = sources
    return profile


def _sig(value: float) -> float:
    """``value`` to 4 significant digits (a profile is read by people; the trace's resolution is 1 us)."""
    return float(f"{value:.4g}")


def _launch_why(launch: str) -> str:
    return {"cuda_graphs": "cudaGraphLaunch calls", "compile": "over 30% of kernels are triton_ kernels"}.get(
        launch, "kernels launched one by one (no graph launches, few triton_ kernels)")


def _sync_kinds(stats: TraceStats) -> str:
    kinds: dict[str, int] = {}
    for p in stats.phases.values():
        for k, v in p.syncs.items():
            kinds[k] = kinds.get(k, 0) + v
    return ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) + " synchronisations" if kinds else "no syncs"


def efficiency_yaml_data(efficiency: ComputeEfficiency) -> dict:
    """The override table in the shipped compute_efficiency.yaml layout ({architecture: table})."""
    data = efficiency.model_dump(mode="json", exclude={"architecture"})
    data["tiles"] = [dict(t) for t in data["tiles"]]
    return {efficiency.architecture: data}
