"""Text tables of a memory report (the CLI prints these; no file is written here)."""

from __future__ import annotations

from simulator.memory.items import BUCKETS, MemoryReport
from simulator.units.constants import GiB

_COLUMNS = (*BUCKETS, "total", "peak")


def render_memory_table(report: MemoryReport, *, unit: float = GiB, unit_name: str = "GiB") -> str:
    """One row per pipeline stage with docs/interface.md's buckets, total and peak, then the OOM verdict."""
    head = f"{'stage':>5} " + " ".join(f"{c:>12}" for c in _COLUMNS)
    lines = [f"memory per GPU ({unit_name})", head, "-" * len(head)]
    for s in report.stages:
        values = [s.bucket(b) for b in BUCKETS] + [s.total, s.peak]
        lines.append(f"{s.stage:>5} " + " ".join(f"{v / unit:>12.2f}" for v in values))
    lines.append(f"peak {report.peak_bytes / unit:.2f} {unit_name} of tensors; on the device "
                 f"{report.device_peak_bytes / unit:.2f} {unit_name} with the CUDA runtime and allocator cache "
                 f"({report.runtime_bytes / unit:.2f} {unit_name}) and the communication buffers (NCCL, DeepEP) "
                 f"({report.nccl_bytes / unit:.2f} {unit_name}, largest stage)")
    if report.hbm_capacity_bytes is not None:
        margin = report.margin_bytes
        verdict = "OUT OF MEMORY" if report.oom else "fits"
        lines.append(f"HBM {report.hbm_capacity_bytes / unit:.2f} {unit_name}: {verdict}, margin "
                     f"{margin / unit:+.2f} {unit_name}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def render_items(report: MemoryReport, stage: int = 0, *, unit: float = GiB, unit_name: str = "GiB") -> str:
    """Every item of one stage: bucket, name, size and the formula that gave it."""
    s = report.stages[stage]
    lines = [f"stage {stage} items ({unit_name})"]
    for i in s.items:
        lines.append(f"{i.bucket:<12} {i.name:<34} {i.bytes / unit:>10.4f}  {i.formula}")
    for name, b in s.phases:   # gradients created layer by layer: the live bytes at each phase of backward
        lines.append(f"{'phase':<12} {name:<34} {b / unit:>10.4f}  live at {name}{' (peak)' if b == s.peak else ''}")
    return "\n".join(lines)
