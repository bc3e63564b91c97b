"""A simulation result for people: memory per stage, time breakdown, comm per dimension, warnings."""

from __future__ import annotations

from simulator.report.step import BASE_PARTS, PART_LABELS
from simulator.report.table import render_markdown, render_table
from simulator.report.wholerun import render_run
from simulator.units import GIBI

MEMORY_COLUMNS = ("weights", "gradients", "main_params", "optimizer", "activations", "other", "total")
MILLI = 1e-3


def header(result) -> str:
    s = result.scenario
    p = s.parallel
    return (f"scenario {s.name}: {s.model.name} on {s.gpus} GPUs ({s.cluster.nodes} x {s.cluster.node.name}); "
            f"tp {p.tp} pp {p.pp} dp {s.plan.dp} cp {p.cp} ep {p.ep} ulysses {p.ulysses} vpp {p.vpp}"
            f"{f' schedule {p.schedule}' if s.plan.schedule.splits_backward else ''}; "
            f"seq {s.training.seq_len} micro-batch {s.training.micro_batch} global batch {s.training.global_batch}")


def memory_rows(result) -> tuple[list[str], list[list[object]]]:
    """Per-stage memory in GiB with docs/interface.md's buckets."""
    rows = []
    for stage in result.memory.to_dict()["stages"]:
        rows.append([stage["stage"]] + [round(stage[c] / GIBI, 2) for c in (*MEMORY_COLUMNS, "peak")])
    return ["stage", *MEMORY_COLUMNS, "peak"], rows


def time_rows(result) -> tuple[list[str], list[list[object]]]:
    """The step-time breakdown: each part in seconds and as a share of the step."""
    step = result.step
    parts = [(PART_LABELS.get(name, f"{name} comm" if name.startswith("exposed ") else name), v)
             for name, v in step.parts if name in BASE_PARTS or v > 0]
    rows = [[name, round(v, 4), f"{v / step.step_s:.1%}"] for name, v in parts]
    rows.append(["step", round(step.step_s, 4), "100.0%"])
    return ["part", "seconds", "share"], rows


def comm_rows(result) -> tuple[list[str], list[list[object]]]:
    """Every communication op per step: dimension, op, bytes per call, calls, time per call and in total."""
    rows = [[r.dim, r.op, r.name, int(r.bytes), r.count, round(r.call_s / MILLI, 4), round(r.time_s, 4),
             r.algorithm, r.link] for r in result.step.comm]
    return ["dim", "op", "what", "bytes", "count", "ms/call", "total s", "algorithm", "link"], rows


def render_result(result, fmt: str = "text") -> str:
    """The whole result as text (``text``) or Markdown (``markdown``)."""
    table = render_markdown if fmt == "markdown" else render_table
    capacity = result.scenario.cluster.node.gpu.memory.capacity
    memory = table(*memory_rows(result), title=f"memory per GPU (GiB; HBM {capacity / GIBI:.1f} GiB, peak "
                                               f"{result.memory.peak_bytes / GIBI:.2f} GiB, on the device with "
                                               f"runtime, allocator cache and communication buffers "
                                               f"({result.memory.nccl_bytes / GIBI:.2f} GiB) "
                                               f"{result.memory.device_peak_bytes / GIBI:.2f} GiB, margin "
                                               f"{result.memory.margin_bytes / GIBI:+.2f} GiB)")
    notes = result.warnings()
    warnings = ["", *(f"warning: {n}" if fmt == "text" else f"- {n}" for n in notes)] if notes else []
    step = result.step
    if step is None:
        return "\n".join([header(result), "", memory, "",
                          "inference: serving memory only (weights, KV cache, prefill transients); the step-time "
                          "engine times training steps", *warnings])
    throughput = (f"tokens/s {step.tokens_per_s:,.0f}; model {step.model_tflops_per_gpu:.1f} TFLOP/s per GPU "
                  f"(MFU {step.mfu:.1%}); hardware {step.hardware_tflops_per_gpu:.1f} TFLOP/s per GPU "
                  f"(HFU {step.hfu:.1%})")
    parts = [header(result), "", memory, "",
             table(*time_rows(result), title=f"step time {step.step_s:.4f} s (set by pipeline stage "
                                             f"{step.critical_stage}, the busiest; largest part: "
                                             f"{step.bottleneck['resource']})"),
             throughput, "",
             table(*comm_rows(result), title="communication per step (time per call and busy time, hidden or not)")]
    if result.run is not None:
        parts += ["", render_run(result.run.to_dict(), fmt)]
    return "\n".join(parts + warnings)
