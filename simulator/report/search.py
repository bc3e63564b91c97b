"""Text tables of a plan search (``simulator search``): the top plans, their breakdowns, the winner's margin and
the rejection counts. Takes :class:`simulator.search.SearchResult`-shaped data (rows as dicts)."""

from __future__ import annotations

from typing import Any

from simulator.units import GIBI

_COLUMNS = ("rank", "gpus", "tp", "pp", "vpp", "cp", "ep", "dp", "sp", "schedule", "recompute", "sharding",
            "micro_batch")
_TERMS = ("compute_s", "recompute_s", "bubble_s", "optimizer_s")


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
    out = [f"{result.evaluated:,} plans evaluated, {result.valid:,} valid, "
           f"{result.evaluated - result.valid:,} rejected in {result.seconds:.2f} s "
           f"({result.evaluated / max(result.seconds, 1e-9):,.0f} plans/s); objective {result.objective}", ""]
    header = [*_COLUMNS, "step_s", "peak_GiB", "MFU", "tokens/s"]
    rows = [[str(p[c]) for c in _COLUMNS] + [f"{p['step_s']:.3f}", f"{p['device_peak_bytes'] / GIBI:.1f}",
                                             f"{p['mfu']:.1%}", f"{p['tokens_per_s']:,.0f}"] for p in plans]
    out += _table(header, rows)
    out += ["", "breakdown of the step (s, critical stage): compute, recompute, bubble, optimizer, exposed comm"]
    out += _table(["rank", *(t.removesuffix("_s") for t in _TERMS), "exposed"],
                  [[str(p["rank"]), *(f"{p[t]:.3f}" for t in _TERMS), _exposed(p)] for p in plans])
    if why_line:
        out += ["", why_line]
    if result.rejected:
        out += ["", "rejected (count, rule):"]
        out += [f"{n:>10,}  {reason}" for reason, n in list(result.rejected.items())[:8]]
        if len(result.rejected) > 8:
            out.append(f"{sum(list(result.rejected.values())[8:]):>10,}  ({len(result.rejected) - 8} other rules)")
    return "\n".join(out)
