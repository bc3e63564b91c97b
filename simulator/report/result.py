"""A simulation result for people: memory per stage, time breakdown, comm per dimension, warnings."""

from __future__ import annotations

from simulator.report.table import render_markdown, render_table
from simulator.units import GIBI

MEMORY_COLUMNS = ("weights", "gradients", "main_params", "optimizer", "activations", "other", "total")


def header(result) -> str:
    s = result.scenario
    p = s.parallel
    return (f"scenario {s.name}: {s.model.name} on {s.gpus} GPUs ({s.cluster.nodes} x {s.cluster.node.name}); "
            f"tp {p.tp} pp {p.pp} dp {s.plan.dp} cp {p.cp} ep {p.ep} ulysses {p.ulysses} vpp {p.vpp}; "
            f"seq {s.training.seq_len} micro-batch {s.training.micro_batch} global batch {s.training.global_batch}")


def memory_rows(result) -> tuple[list[str], list[list[object]]]:
    """Per-stage memory in GiB with CONTRACT.md's buckets."""
    rows = []
    for stage in result.memory.to_dict()["stages"]:
        rows.append([stage["stage"]] + [round(stage[c] / GIBI, 2) for c in (*MEMORY_COLUMNS, "peak")])
    return ["stage", *MEMORY_COLUMNS, "peak"], rows


def warnings(result) -> list[str]:
    """What a careful engineer would flag: out of memory (with the margin), plan notes."""
    out = []
    memory = result.memory
    capacity = result.scenario.cluster.node.gpu.memory.capacity
    if memory.oom:
        out.append(f"OUT OF MEMORY: peak {memory.peak_bytes / GIBI:.1f} GiB exceeds {capacity / GIBI:.1f} GiB HBM by "
                   f"{-memory.margin_bytes / GIBI:.1f} GiB")
    out += list(dict.fromkeys([*result.scenario.plan.notes, *memory.notes]))
    return out


def render_result(result, fmt: str = "text") -> str:
    """The whole result as text (``text``) or Markdown (``markdown``)."""
    table = render_markdown if fmt == "markdown" else render_table
    heads, rows = memory_rows(result)
    capacity = result.scenario.cluster.node.gpu.memory.capacity
    parts = [header(result), "",
             table(heads, rows, title=f"memory per GPU (GiB; HBM {capacity / GIBI:.1f} GiB, peak "
                                      f"{result.memory.peak_bytes / GIBI:.2f} GiB, margin "
                                      f"{result.memory.margin_bytes / GIBI:+.2f} GiB)")]
    notes = warnings(result)
    if notes:
        parts += ["", *(f"warning: {n}" if fmt == "text" else f"- {n}" for n in notes)]
    return "\n".join(parts)
