"""Text tables of a simulated step: the time breakdown and the comm table."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.schedule import StepResult


#: the breakdown parts every report shows, zero or not (the host wait and exposed comm only when present)
BASE_PARTS = ("compute", "recompute", "bubble", "optimizer")
#: how reports name a part of :attr:`StepResult.parts` where its key is terse
PART_LABELS = {"host": "host launch wait"}


def render_step(result: StepResult) -> str:
    """Step time, breakdown (s and % of the step), throughput and the per-dimension comm table."""
    d = result.to_dict()
    t = d["time"]
    rows = [(PART_LABELS.get(name, name), v) for name, v in result.parts if name in BASE_PARTS or v]
    lines = [f"step time {t['step_s']:.4f} s (set by stage {result.critical_stage}, largest part: "
             f"{result.bottleneck['resource']})"]
    lines += [f"  {name:<18} {v:10.4f} s {v / t['step_s']:7.1%}" for name, v in rows]
    th = d["throughput"]
    lines.append(f"tokens/s {th['tokens_per_s']:.4g}  model TFLOP/s/GPU {th['model_tflops_per_gpu']:.1f}  "
                 f"hardware TFLOP/s/GPU {th['hardware_tflops_per_gpu']:.1f}  MFU {th['mfu']:.1%}  HFU {th['hfu']:.1%}")
    lines.append(f"{'dim':<8}{'op':<15}{'bytes':>12}{'count':>8}{'per call':>11}{'total':>10}  algorithm / link")
    for r in d["comm"]:
        lines.append(f"{r['dim']:<8}{r['op']:<15}{r['bytes']:12.4g}{r['count']:8d}{r['call_s'] * 1e3:9.3f}ms"
                     f"{r['time_s']:9.3f}s  {r['algorithm']} / {r['link']}  ({r['name']})")
    return "\n".join(lines)
