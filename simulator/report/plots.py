"""Plots (matplotlib, imported inside each function so the package import stays light).

Every function takes results or tables and a path, draws one figure, and returns the path.
"""

from __future__ import annotations

from pathlib import Path

from simulator.report.step import PART_LABELS
from simulator.units import GIBI

MEMORY_COLOURS = {"weights": "#4c72b0", "gradients": "#dd8452", "main_params": "#55a868", "optimizer": "#c44e52",
                  "activations": "#8172b3", "other": "#937860"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def memory_axes(ax, result) -> None:
    """Stacked bars of each stage's memory buckets against the GPU's HBM capacity."""
    stages = result.memory.to_dict()["stages"]
    bottom = [0.0] * len(stages)
    x = [s["stage"] for s in stages]
    for bucket, colour in MEMORY_COLOURS.items():
        values = [s[bucket] / GIBI for s in stages]
        ax.bar(x, values, bottom=bottom, color=colour, label=bucket)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    capacity = result.scenario.cluster.node.gpu.memory.capacity / GIBI
    ax.axhline(capacity, color="black", linestyle="--", linewidth=1)
    ax.text(x[-1], capacity, f" HBM {capacity:.0f} GiB", va="bottom", ha="right", fontsize=8)
    for xi, total, stage in zip(x, bottom, stages, strict=True):
        if stage["peak"] / GIBI > capacity:
            ax.text(xi, total, "OOM", ha="center", va="bottom", color="red", fontsize=8, fontweight="bold")
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GiB per GPU")
    ax.set_xticks(x)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_memory(result, path: str | Path) -> Path:
    """Memory per stage as stacked bars with the HBM line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(result.memory.stages) + 3), 4))
    memory_axes(ax, result)
    ax.set_title(f"{result.scenario.name}: memory per GPU")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return Path(path)


def plot_sweep_heatmap(frame, x: str, y: str, value: str, path: str | Path, *, title: str = "") -> Path:
    """A heat map of ``value`` over two swept keys (best value over the other keys); OOM and invalid cells marked."""
    import numpy as np

    plt = _pyplot()
    xs, ys = sorted(frame[x].unique()), sorted(frame[y].unique())
    grid = np.full((len(ys), len(xs)), np.nan)
    marks = {}
    for (xv, yv), group in frame.groupby([x, y]):
        ok = group[group["status"] == "ok"]
        i, j = ys.index(yv), xs.index(xv)
        if len(ok) and value in ok:
            grid[i, j] = ok[value].min()
        else:
            marks[(i, j)] = "OOM" if (group["status"] == "oom").any() else "n/a"
    fig, ax = plt.subplots(figsize=(1.1 * len(xs) + 3, 0.8 * len(ys) + 2))
    image = ax.imshow(grid, cmap="viridis_r", origin="lower", aspect="auto")
    fig.colorbar(image, ax=ax, label=value)
    for i in range(len(ys)):
        for j in range(len(xs)):
            text = marks.get((i, j)) or f"{grid[i, j]:.3g}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="red" if (i, j) in marks else "white")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{value} (best over the other swept keys)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return Path(path)


BREAKDOWN_COLOURS = {"compute": "#4c72b0", "recompute": "#8172b3", "bubble": "#cccccc", "optimizer": "#937860",
                     "host": "#ccb974",
                     "tp": "#dd8452", "cp": "#55a868", "ulysses": "#64b5cd", "ep": "#c44e52", "pp": "#da8bc3",
                     "dp": "#8c8c8c"}


def breakdown_axes(ax, result) -> None:
    """One horizontal stacked bar: where the step time goes (exposed comm per dimension)."""
    step = result.step
    left = 0.0
    for name, value in step.parts:
        if value <= 0:
            continue
        colour = BREAKDOWN_COLOURS.get(name.removeprefix("exposed "), "#999999")
        ax.barh([0], [value], left=left, color=colour, label=PART_LABELS.get(name, name))
        left += value
    ax.set_yticks([])
    ax.set_xlabel("seconds")
    ax.set_title(f"step {step.step_s:.3f} s, MFU {step.mfu:.1%}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


#: bars drawn one by one on the timeline; beyond it, each lane's bars are merged into busy spans (said in the title)
MAX_TIMELINE_BARS = 200_000


def timeline_axes(ax, result, max_bars: int = MAX_TIMELINE_BARS) -> str:
    """Gantt chart of the step: one row per (pipeline stage, stream), every lane drawn to the end of the step.

    Each lane is one ``broken_barh`` per colour. When the step has more than ``max_bars`` bars, every lane's bars
    are merged into busy spans (gaps shorter than 1/2000 of the step closed) and the title says so; the returned
    note (empty when everything was drawn) says what was merged."""
    events = [e for e in result.step.events() if e.dur_s > 0]
    streams = sorted({(e.stage, e.stream) for e in events}, key=lambda k: (k[0], k[1] != "compute", k[1]))
    row = {k: i for i, k in enumerate(streams)}
    lanes: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for e in events:
        lanes.setdefault((row[(e.stage, e.stream)], _bar_colour(e)), []).append((e.start_s, e.dur_s))
    note = ""
    if len(events) > max_bars:
        gap = max((e.start_s + e.dur_s for e in events), default=0.0) / 2000
        lanes = {k: _merge_spans(v, gap) for k, v in lanes.items()}
        note = (f"{len(events):,} bars merged into {sum(len(v) for v in lanes.values()):,} busy spans "
                f"(more than {max_bars:,} bars)")
    for (index, colour), spans in lanes.items():
        ax.broken_barh(spans, (index - 0.4, 0.8), facecolors=colour)
    ax.set_yticks(range(len(streams)), [f"stage {s} {n}" for s, n in streams], fontsize=6)
    ax.set_ylim(len(streams) - 0.5, -0.5)
    ax.set_xlabel("seconds")
    ax.set_title("timeline (forward light, backward dark; comm streams below each stage)"
                 + (f"\n{note}" if note else ""), fontsize=9)
    return note


def _bar_colour(e) -> str:
    if e.stream == "compute":
        return "#2a4d7a" if e.name.lower().startswith("b") else "#4c72b0"
    return BREAKDOWN_COLOURS.get(e.stream.split()[0], "#999999")


def _merge_spans(spans: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, duration) bars merged where the next starts less than ``gap`` after the previous ends."""
    merged: list[list[float]] = []
    for start, dur in sorted(spans):
        if merged and start - (merged[-1][0] + merged[-1][1]) < gap:
            merged[-1][1] = max(merged[-1][1], start + dur - merged[-1][0])
        else:
            merged.append([start, dur])
    return [(s, d) for s, d in merged]


def plot_result(result, path: str | Path) -> Path:
    """Memory per stage, step-time breakdown and the pipeline timeline in one figure (memory only for inference)."""
    if result.step is None:
        return plot_memory(result, path)
    plt = _pyplot()
    stages = len(result.memory.stages)
    fig = plt.figure(figsize=(12, 4 + 0.25 * stages * 3))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.4], width_ratios=[1, 1.3])
    memory_axes(fig.add_subplot(grid[0, 0]), result)
    breakdown_axes(fig.add_subplot(grid[0, 1]), result)
    timeline_axes(fig.add_subplot(grid[1, :]), result)
    fig.suptitle(result.scenario.name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
