"""What the CLI prints: a table (list of dicts with docs/interface.md's JSON keys) and busbw-vs-size plots."""

from __future__ import annotations

import numpy as np

from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS, Coefficients
from simulator.collectives.model import build_cost_model, busbw_factor, evaluate, feasible_algorithms
from simulator.collectives.placement import GroupPlacement
from simulator.hardware.calibration import Calibration
from simulator.units.constants import GIGA, MICRO


def collective_table(placement: GroupPlacement, op: str, sizes_bytes, algo: str = "auto", proto: str = "auto",
                     calibration: Calibration | None = None,
                     coefficients: Coefficients = DEFAULT_COEFFICIENTS) -> list[dict]:
    """One dict per size (per algorithm when ``algo='all'``):
    ``{op, bytes, ranks, time_us, algbw_GBps, busbw_GBps, algorithm, protocol}`` (docs/interface.md)."""
    model = build_cost_model(placement, coefficients, calibration)
    algos = feasible_algorithms(model, op) if algo == "all" else (algo,)
    n = placement.n_ranks
    rows = []
    for a in algos:
        ev = evaluate(model, op, sizes_bytes, a, proto)
        for size, t, al, pr in zip(ev.sizes_bytes, ev.times_s, ev.algorithms, ev.protocols, strict=True):
            algbw = size / t / GIGA if t > 0 else float("inf")
            rows.append({"op": op, "bytes": int(size), "ranks": n, "time_us": float(t / MICRO),
                         "algbw_GBps": float(algbw), "busbw_GBps": float(algbw * busbw_factor(op, n)),
                         "algorithm": al, "protocol": pr})
    return rows


def format_table(rows: list[dict]) -> str:
    """Fixed-width text of :func:`collective_table` rows."""
    head = f"{'op':14s} {'bytes':>12s} {'ranks':>5s} {'time_us':>11s} {'algbw_GBps':>10s} {'busbw_GBps':>10s}  algorithm/protocol"
    lines = [head]
    for r in rows:
        lines.append(f"{r['op']:14s} {r['bytes']:12d} {r['ranks']:5d} {r['time_us']:11.2f} {r['algbw_GBps']:10.2f} "
                     f"{r['busbw_GBps']:10.2f}  {r['algorithm']}/{r['protocol']}")
    return "\n".join(lines)


def plot_busbw(rows: list[dict], path: str, title: str = "") -> None:
    """Bus bandwidth vs size, one line per algorithm (matplotlib imported here, not at package import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        series.setdefault(r["algorithm"] if len({x["algorithm"] for x in rows}) > 1 else r["op"], []).append(
            (r["bytes"], r["busbw_GBps"]))
    for name, pts in series.items():
        x, y = np.array(pts).T
        ax.plot(x, y, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title or (rows[0]["op"] if rows else ""))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
