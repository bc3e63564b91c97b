"""The multimodal result as JSON (``to_dict``), flat summary keys (goldens) and a text report.

JSON (docs/multimodal.md defines every key): ``time.step_s``, ``throughput.samples_per_s``, ``memory.peak_bytes``
(the largest per-GPU tensor peak over submodules) and ``memory.device_peak_bytes``, ``submodules`` (name -> plan,
memory per stage, step parts), ``step`` (how the submodules combine), ``comparison`` (uniform vs DistMM, with
``speedup``) and ``encoder_first_stage`` (LLM-based models).
"""

from __future__ import annotations

from typing import Any

from simulator.multimodal.compose import MultimodalStep
from simulator.multimodal.scenario import MultimodalResult
from simulator.units import GIBI


def to_dict(result: MultimodalResult) -> dict[str, Any]:
    sc, step = result.scenario, result.step
    runtime = next(iter(step.runs.values())).memory.runtime_bytes
    out: dict[str, Any] = {
        "scenario": sc.name,
        "system": {"profile": sc.cluster.node.name, "nodes": sc.cluster.nodes, "gpus": sc.gpus},
        "model": sc.spec.name,
        "multimodal": {"loss": sc.spec.loss, "global_batch": sc.section.global_batch,
                       "strategy": sc.section.strategy, "placement": step.placement},
        "memory": {"peak_bytes": step.device_peak_bytes - runtime, "device_peak_bytes": step.device_peak_bytes,
                   "oom": step.oom},
        "time": {"step_s": step.step_s},
        "throughput": {"samples_per_s": step.samples_per_s},
        "step": step.to_dict(),
        "submodules": {n: r.to_dict() for n, r in step.runs.items()},
    }
    if result.compared:
        mono = result.monolithic
        out["comparison"] = {"uniform": _brief(result.uniform) if result.uniform is not None else {"fits": False},
                             "distmm": _brief(result.distmm),
                             "speedup": result.speedup,
                             "monolithic": mono.to_dict() if mono is not None else {"fits": False},
                             "speedup_vs_monolithic": result.speedup_vs_monolithic}
    if result.first_stage is not None:
        out["encoder_first_stage"] = result.first_stage.to_dict()
    out["warnings"] = warnings(result)
    return out


def _brief(step: MultimodalStep) -> dict[str, Any]:
    return {**step.to_dict(), "plans": {n: r.choice.to_dict() for n, r in step.runs.items()},
            "submodule_step_s": {n: r.step_s for n, r in step.runs.items()}}


def warnings(result: MultimodalResult) -> list[str]:
    out = []
    step = result.step
    for name, run in step.runs.items():
        if run.oom:
            out.append(f"OUT OF MEMORY: submodule {name} peaks at {run.device_peak_bytes / GIBI:.1f} GiB")
    if step.strategy == "distmm" and step.imbalance > 1.5:
        slow = max(step.runs, key=lambda n: step.runs[n].step_s)
        out.append(f"submodules are imbalanced: {slow} is {step.imbalance:.2f}x the fastest (move GPUs to it)")
    return out


def summary(result: MultimodalResult) -> dict[str, Any]:
    """Flat ``section.name`` keys (the multimodal goldens)."""
    step = result.step
    row: dict[str, Any] = {"gpus": step.gpus, "time.step_s": step.step_s, "time.exchange_s": step.exchange_s,
                           "time.loss_s": step.loss_s, "memory.device_peak_bytes": step.device_peak_bytes,
                           "throughput.samples_per_s": step.samples_per_s}
    for name, run in step.runs.items():
        row.update({f"submodules.{name}.gpus": run.choice.gpus, f"submodules.{name}.step_s": run.step_s,
                    f"submodules.{name}.device_peak_bytes": run.device_peak_bytes})
    if result.compared:
        row["comparison.uniform_step_s"] = result.uniform.step_s if result.uniform else None
        row["comparison.distmm_step_s"] = result.distmm.step_s
        row["comparison.speedup"] = result.speedup
        row["comparison.monolithic_step_s"] = result.monolithic.step_s if result.monolithic else None
        row["comparison.speedup_vs_monolithic"] = result.speedup_vs_monolithic
    if result.first_stage is not None:
        row["encoder_first_stage.step_s"] = result.first_stage.step_s
        row["encoder_first_stage.imbalance"] = result.first_stage.imbalance
    return row


def render_text(result: MultimodalResult) -> str:
    sc, step = result.scenario, result.step
    lines = [f"{sc.name}: {sc.spec.name} ({sc.spec.loss}) on {sc.cluster.nodes} x {sc.cluster.node.name} "
             f"({sc.gpus} GPUs), global batch {sc.section.global_batch}",
             f"plan: {step.strategy}, placement {step.placement}", "",
             "submodule   GPUs  tp pp  dp  mb  recompute  tokens  step s   compute s  bubble s  exposed dp s  "
             "memory per GPU GiB"]
    for name, r in step.runs.items():
        c, s = r.choice, r.step
        lines.append(f"{name:<10} {c.gpus:>5} {c.tp:>3} {c.pp:>2} {c.dp:>3} {c.micro_batch:>3}  {c.recompute:<9} "
                     f"{r.plan.training.seq_len:>6}  {r.step_s:>7.3f}  {r.compute_s:>9.3f}  {s.bubble_s:>8.3f}  "
                     f"{s.exposed_comm_s.get('dp', 0.0):>12.3f}  {r.device_peak_bytes / GIBI:>8.1f}"
                     + ("  OOM" if r.oom else ""))
    lines += ["", f"step {step.step_s:.3f} s = submodules {step.submodules_s:.3f} "
                  f"({'sum' if step.strategy == 'uniform' else 'slowest'}) + exchange {step.exchange_s * 1e3:.2f} ms "
                  f"({step.exchange_link}) + fill {step.fill_s * 1e3:.2f} ms + loss {step.loss_s * 1e3:.2f} ms; "
                  f"{step.samples_per_s:.0f} samples/s; memory per GPU peak {step.device_peak_bytes / GIBI:.1f} GiB"]
    if result.compared:
        u, d = result.uniform, result.distmm
        lines += ["", "uniform (colocated: every submodule on all GPUs, one after another) vs DistMM (searched):"]
        if u is None:
            lines.append("  uniform: no plan fits in memory (Megatron-LM runs a contrastive batch as one micro-batch "
                         "per replica)")
        for label, x in (("uniform", u), ("distmm", d)):
            if x is None:
                continue
            plans = ", ".join(f"{n} {r.choice.gpus} GPUs tp{r.choice.tp} pp{r.choice.pp} dp{r.choice.dp} "
                              f"mb{r.choice.micro_batch} {r.choice.recompute}" for n, r in x.runs.items())
            lines.append(f"  {label:<8} {x.step_s:8.3f} s  {x.placement:<14} {plans}")
        if result.speedup is not None:
            lines.append(f"  speedup {result.speedup:.2f}x")
        mono = result.monolithic
        if mono is None:
            lines.append("  monolithic pipeline (Megatron-LM: all layers in one pipeline): no plan fits in memory")
        else:
            c = mono.choice
            lines.append(f"  monolithic pipeline (Megatron-LM: all layers in one pipeline) {mono.step_s:.3f} s, tp{c.tp} "
                         f"pp{c.pp} dp{c.dp} mb{c.micro_batch} {c.recompute}, stage imbalance "
                         f"{mono.stage_imbalance:.2f}; DistMM {result.speedup_vs_monolithic:.2f}x faster")
    if result.first_stage is not None:
        f = result.first_stage
        lines += ["", f"encoder on the LLM's first stage (Megatron): step {f.step_s:.3f} s, stage 0 busy "
                      f"{f.imbalance:.2f}x the other stages; separate encoder pool: {step.step_s:.3f} s"]
    for w in warnings(result):
        lines.append(f"warning: {w}")
    return "\n".join(lines)
