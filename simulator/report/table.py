"""Plain-text and Markdown table renderers (no dependencies), used by every CLI table."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(row[i]) or row[i] is None for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out += [line(list(headers)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def render_markdown(headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned)."""
    numeric = [bool(rows) and all(_is_number(row[i]) or row[i] is None for row in rows) for i in range(len(headers))]
    out = [f"**{title}**", ""] if title else []
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return "" if value is None else str(value)
