"""``simulator calibrate --trace TRACE [--system PROFILE] [--out PROFILE.yaml] [--base NAME]``
(docs/trace_calibration.md): parse, call :func:`simulator.validation.trace_calibration.calibrate_trace`, write the
profile and the efficiency override, print what the trace says."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from simulator.errors import UserError
from simulator.hardware import GpuSpec, load_profile
from simulator.limits import MAX_YAML_BYTES
from simulator.report.files import write_text
from simulator.units import parse_quantity
from simulator.validation.trace_calibration import TraceCalibration, calibrate_trace, efficiency_yaml_data


def output_paths(trace: str, out: str | None) -> tuple[Path, Path]:
    """(profile YAML, efficiency YAML): ``--out`` or the trace's name with ``.profile.yaml``; the efficiency file
    beside it with ``.efficiency.yaml`` in place of ``.profile.yaml`` / ``.yaml``."""
    if out is None:
        stem = Path(trace).name.removesuffix(".gz").removesuffix(".json")
        profile = Path(trace).with_name(f"{stem}.profile.yaml")
    else:
        profile = Path(out)
    base = profile.name.removesuffix(".yaml").removesuffix(".yml").removesuffix(".profile")
    return profile, profile.with_name(f"{base}.efficiency.yaml")


def profile_name(path: Path) -> str:
    """A registry-style name from the file name (lower case letters, digits, underscores)."""
    base = path.name.removesuffix(".yaml").removesuffix(".yml").removesuffix(".profile")
    return re.sub(r"[^a-z0-9_]+", "_", base.lower()).strip("_") or "calibrated"


def calibrate_from_trace(args) -> int:
    expected, scenario = None, None
    if args.scenario:
        from simulator.scenario.load import load_scenario

        scenario = load_scenario(args.scenario)
        expected = scenario.cluster.node.gpu
    if args.system:
        spec = load_profile(args.system)
        expected = spec if isinstance(spec, GpuSpec) else spec.gpu
        if scenario is not None and scenario.cluster.node.gpu.name != expected.name:
            raise UserError(f"--system {args.system} has {expected.name}, the scenario {scenario.cluster.node.gpu.name}",
                            file=args.scenario)
    profile_path, efficiency_path = output_paths(args.trace, args.out)
    event_s = 0.0
    if args.profiler_event_time:
        event_s = parse_quantity(args.profiler_event_time, "time", default_unit="s")
        if not 0 <= event_s <= 1e-3:
            raise UserError(f"--profiler-event-time {args.profiler_event_time}: between 0 and 1 ms per event")
    result = calibrate_trace(args.trace, profile_name(profile_path), expected, base=args.base,
                             profiler_event_s=event_s, scenario=scenario)
    profile = dict(result.profile)
    if result.efficiency is not None:
        profile["sources"] = {**profile["sources"], "efficiency": f"{efficiency_path.name}: GEMM peak fraction "
                              f"fitted to the trace's {result.gemm_dtype} GEMMs (simulator calibrate --trace)"}
    texts = [(profile_path, yaml.safe_dump(profile, sort_keys=False, width=120))]
    if result.efficiency is not None:
        texts.append((efficiency_path, yaml.safe_dump(efficiency_yaml_data(result.efficiency), sort_keys=False,
                                                      width=120)))
    for path, text in texts:
        if len(text) > MAX_YAML_BYTES:
            raise UserError(f"would be {len(text):,} bytes, over the {MAX_YAML_BYTES:,} a YAML input may have",
                            file=str(path))
    for path, text in texts:
        write_text(path, text)
    print(summary(result))
    print("wrote " + " and ".join(str(p) for p, _ in texts))
    return 0


def summary(result: TraceCalibration) -> str:
    """What the trace says, per step (a text table)."""
    s = result.stats
    lines = [f"trace {s.file}: {s.gpu_name} -> GPU profile {result.gpu.name}; {s.steps} step(s), launch {s.launch}",
             f"{'phase':10} {'kernels':>8} {'launches':>9} {'kernel_ms':>10} {'busy_ms':>8} {'idle_ms':>8} "
             f"{'host_idle_ms':>12} {'issue_us':>9} {'syncs':>6} {'layers':>7} {'per_layer':>9}"]
    for name, p in s.phases.items():
        period = s.periods.get(name)
        per = p.issue_per_launch_s
        lines.append(f"{name:10} {p.kernels / s.steps:8.0f} {p.launches / s.steps:9.0f} "
                     f"{p.kernel_s / s.steps * 1e3:10.3f} {p.gpu_busy_s / s.steps * 1e3:8.3f} "
                     f"{p.gpu_idle_s / s.steps * 1e3:8.3f} {p.host_bound_idle_s / s.steps * 1e3:12.3f} "
                     f"{per * 1e6 if per is not None else float('nan'):9.2f} {sum(p.syncs.values()) / s.steps:6.0f} "
                     f"{period.layers if period else '-':>7} {period.kernels_per_layer if period else '-':>9}")
    lines.append(f"step GPU busy {s.step_gpu_busy_s * 1e3:.3f} ms of a {s.step_gpu_span_s * 1e3:.3f} ms device span")
    if result.gemm_dtype:
        flops = sum(g.flops for g in s.gemms if g.dtype == result.gemm_dtype and g.batch == 1)
        fraction = result.efficiency.peak_fraction[result.gemm_dtype]
        lines.append(f"GEMMs ({result.gemm_dtype}): {len(s.gemms)} with shapes, {result.gemm_measured_s * 1e3:.3f} ms, "
                     f"{flops / result.gemm_measured_s / 1e12:.1f} TFLOP/s achieved; shipped model "
                     f"{result.gemm_model_before_s * 1e3:.3f} ms -> peak_fraction.{result.gemm_dtype} {fraction:.3f}"
                     + (" (clamped: the model cannot match)" if result.clamped else ""))
        e = result.efficiency
        if result.attention_dim is not None:
            lines.append(f"attention: {s.attention_s / s.steps * 1e3:.3f} ms of fused kernels per step over "
                         f"{len(s.attention_shapes)} SDPA calls -> sdpa_by_head_dim.{result.attention_dim} "
                         f"{e.sdpa_by_head_dim[result.attention_dim]:.3f}")
        if "optimizer_efficiency fitted" in e.source:
            lines.append(f"optimizer_efficiency {e.optimizer_efficiency:.3f}, memory_efficiency "
                         f"{e.memory_efficiency:.3f} (the scenario's step = the trace's GPU busy time)")
    else:
        lines.append("GEMMs: none with recorded shapes (profile with record_shapes=True): no efficiency override")
    return "\n".join(lines)
