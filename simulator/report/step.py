"""Text tables of a simulated step: the time breakdown and the comm table."""

from __future__ import annotations

from simulator.schedule import StepResult


def render_step(result: StepResult) -> str:
    """Step time, breakdown (s and % of the step), throughput and the per-dimension comm table."""
    d = result.to_dict()
    t, b = d["time"], d["time"]["breakdown_s"]
    rows = [("compute", b["compute"]), ("recompute", b["recompute"]), ("bubble", b["bubble"]),
            ("optimizer", b["optimizer"])] + ([("host launch wait", b["host"])] if b["host"] else []) + [(f"exposed {k}", v) for k, v in b["exposed_comm"].items() if v]
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
