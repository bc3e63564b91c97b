"""Text tables of a plan search (``simulator search``): the top plans, their breakdowns, the winner's margin and
the rejection counts. Takes :class:`simulator.search.SearchResult`-shaped data (rows as dicts)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from simulator.units import GIBI

_COLUMNS = ("rank", "gpus", "tp", "pp", "vpp", "cp", "ep", "dp", "sp", "schedule", "recompute", "sharding",
            "micro_batch")
_TERMS = ("compute_s", "recompute_s", "bubble_s", "optimizer_s", "host_s", "offload_s")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))
    return [line, "-" * len(line)] + ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]


def _exposed(row: dict[str, Any]) -> str:
    parts = [(k.removeprefix("exposed_").removesuffix("_s"), v) for k, v in row.items()
             if k.startswith("exposed_") and v > 0]
    return " ".join(f"{d} {v:.3f}" for d, v in parts) or "-"


def render_search(result, top: int, why_line: str | None) -> str:
    """The summary line, the top ``top`` plans with their breakdown, why #1 wins and the rejection counts."""
    plans = result.plans[:top]
    by_memory, by_bound = result.pruned_by_memory, result.pruned_by_bound
    seconds = max(result.seconds, 1e-9)
    bounded = f", {by_bound:,} not timed (provably below the first plans)" if by_bound else ""
    by_group = getattr(result, "pruned_by_group_bound", 0)
    grouped = f"; {by_group:,} points in groups provably below the first plans (not resolved)" if by_group else ""
    by_peak = getattr(result, "pruned_by_memory_bound", 0)
    grouped += (f"; {by_peak:,} points whose device peak is provably above HBM (not resolved: each out of memory "
                "or rejected by a rule)" if by_peak else "")
    out = [f"{result.evaluated:,} points of the plan space in {result.seconds:.2f} s "
           f"({result.evaluated / seconds:,.0f}/s): {result.valid + by_memory + by_bound:,} plans pass the rules, "
           f"{by_memory:,} of them do not fit in memory{bounded}, {result.valid:,} valid plans timed "
           f"({result.valid / seconds:,.0f}/s){grouped}; "
           f"{result.evaluated - result.valid - by_memory - by_bound - by_group - by_peak:,} points rejected by the "
           "rules; "
           f"objective {result.objective}", ""]
    header = [*_COLUMNS, "step_s", "peak_GiB", "MFU", "tokens/s"]
    rows = [[str(p[c]) for c in _COLUMNS] + [f"{p['step_s']:.3f}", f"{p['device_peak_bytes'] / GIBI:.1f}",
                                             f"{p['mfu']:.1%}", f"{p['tokens_per_s']:,.0f}"] for p in plans]
    out += _table(header, rows)
    if plans and "run_days" in plans[0]:   # ranked by a whole-run figure (--objective days|cost|energy)
        out += ["", "the whole run (run: section): wall-clock days, goodput, energy, cost"]
        out += _table(["rank", "days", "goodput", "MWh", "cost", "GPU-hours"],
                      [[str(p["rank"]), f"{p['run_days']:.2f}", f"{p['run_goodput']:.1%}",
                        f"{p['run_energy_MWh']:,.1f}", f"{p['run_cost']:,.0f}" if p["run_cost"] is not None else "-",
                        f"{p['run_gpu_hours']:,.0f}"] for p in plans])
    out += ["", "breakdown of the step (s, critical stage): compute, recompute, bubble, optimizer, exposed comm"]
    out += _table(["rank", *(t.removesuffix("_s") for t in _TERMS), "exposed"],
                  [[str(p["rank"]), *(f"{p[t]:.3f}" for t in _TERMS), _exposed(p)] for p in plans])
    if why_line:
        out += ["", why_line]
    how = Counter(p["timeline"] for p in result.plans)
    if how:     # the schedules without an exact evaluator but the replay are replayed: say how many plans
        out += ["", "pipeline timelines: " + ", ".join(f"{n:,} by {label}" for label, n in how.most_common())]
    if result.rejected:
        out += ["", "rejected (count, rule):"]
        out += [f"{n:>10,}  {reason}" for reason, n in list(result.rejected.items())[:8]]
        if len(result.rejected) > 8:
            out.append(f"{sum(list(result.rejected.values())[8:]):>10,}  ({len(result.rejected) - 8} other rules)")
    return "\n".join(out)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (smaller is better in both), sorted by the
    first coordinate."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def plot_search(result, path: str) -> str:
    """Two panels of every valid plan: step time against device peak memory (left) and against the GPU count
    (right), each with its Pareto front (no plan both faster and smaller, or faster on fewer GPUs) drawn as a line
    and the best plan marked; GPU counts as colours when the search tried several (``search.gpus``)."""
    from simulator.report.plots import _pyplot

    plt = _pyplot()
    plans = result.plans
    memory = [p["device_peak_bytes"] / GIBI for p in plans]
    gpus = [p["gpus"] for p in plans]
    y = [p["step_s"] for p in plans]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for n in sorted(set(gpus)):
        idx = [i for i, g in enumerate(gpus) if g == n]
        left.scatter([memory[i] for i in idx], [y[i] for i in idx], s=10, alpha=0.5, label=f"{n} GPUs")
        right.scatter([n] * len(idx), [y[i] for i in idx], s=10, alpha=0.5)
    for ax, x, label in ((left, memory, "device peak memory per GPU (GiB)"), (right, gpus, "GPUs")):
        front = pareto_front(list(zip(x, y, strict=True)))
        ax.plot([x[i] for i in front], [y[i] for i in front], "k-", lw=1, marker="o", ms=3, label="Pareto front")
        ax.scatter([x[0]], [y[0]], marker="*", s=120, color="red", zorder=3, label="best")
        ax.set_xlabel(label)
    right.set_xscale("log", base=2)
    right.set_xticks(sorted(set(gpus)), [f"{n:,}" for n in sorted(set(gpus))])
    left.set_ylabel("step time (s)")
    left.set_title(f"{result.valid:,} valid plans of {result.evaluated:,}: time vs memory")
    right.set_title("time vs GPUs")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
