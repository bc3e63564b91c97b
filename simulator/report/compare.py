"""Two results side by side with deltas."""

from __future__ import annotations

from simulator.report.table import render_markdown, render_table


def comparison_rows(a, b) -> list[list[object]]:
    """Every summary key of either result: A, B, B - A and B / A - 1 where both are numbers."""
    sa, sb = a.summary(), b.summary()
    rows = []
    for key in dict.fromkeys([*sa, *sb]):
        va, vb = sa.get(key), sb.get(key)
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (va, vb))
        delta = vb - va if numeric else None
        rel = f"{vb / va - 1:+.1%}" if numeric and va else ""
        rows.append([key, va, vb, delta, rel])
    return rows


def render_comparison(a, b, fmt: str = "text") -> str:
    table = render_markdown if fmt == "markdown" else render_table
    title = f"A = {a.scenario.name} ({a.scenario.file}), B = {b.scenario.name} ({b.scenario.file})"
    return table(["quantity", "A", "B", "B - A", "change"], comparison_rows(a, b), title=title)
