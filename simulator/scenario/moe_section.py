"""The ``moe:`` section's data that needs the model or a file: the per-expert load histogram (``moe.histogram``)."""

from __future__ import annotations

import math
from pathlib import Path

from simulator.errors import UserError
from simulator.implementation.moe_settings import MoeSettings, check_histogram
from simulator.limits import MAX_EXPERTS
from simulator.model import ModelSpec

KEY = "moe.histogram"


def resolve_histogram(moe: MoeSettings, model: ModelSpec, file: str | None) -> MoeSettings:
    """``moe`` with a histogram CSV (a path relative to the scenario ``file``) read into counts, and the counts checked
    against ``model``'s experts (one per expert, UserError otherwise)."""
    if moe.histogram is None:
        return moe
    counts = moe.histogram
    if isinstance(counts, str):
        counts = read_counts((Path(file).parent if file else Path(".")) / counts)
    check_histogram(counts, model.moe.experts if model.moe is not None else None)
    return moe if counts is moe.histogram else moe.model_copy(update={"histogram": counts})


def read_counts(path: Path) -> tuple[float, ...]:
    """One count per row in expert-id order; ``#`` comments, blank lines and a header row are skipped; a bad row is a
    UserError at that line of the CSV."""
    if not path.is_file():
        raise UserError(f"{path}: no such file", key_path=KEY)
    counts: list[float] = []
    for line, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
        text = text.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            if not counts and line == 1 or not counts and not any(c.isdigit() for c in text):
                continue  # a header
            raise UserError(f"row {text!r} is not one count", file=str(path), line=line, key_path=KEY) from None
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"count {text} must be a finite number >= 0", file=str(path), line=line, key_path=KEY)
        counts.append(value)
        if len(counts) > MAX_EXPERTS:
            raise UserError(f"more than {MAX_EXPERTS:,} counts", file=str(path), line=line, key_path=KEY)
    return tuple(counts)
