"""Plots (matplotlib, imported inside each function so the package import stays light).

Every function takes results or tables and a path, draws one figure, and returns the path.
"""

from __future__ import annotations

from pathlib import Path

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
