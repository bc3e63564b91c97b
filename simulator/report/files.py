"""Writing output files: the one place the simulator writes to disk."""

from __future__ import annotations

from pathlib import Path

from simulator.errors import UserError


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path``; a missing directory or a permission problem is the user's to fix."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", file=str(path)) from None


def write_parquet(path: str | Path, frame) -> None:
    """Write a pandas DataFrame as Parquet (needs pyarrow: ``pip install -e '.[ray]'`` brings it)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UserError("--parquet needs pyarrow: pip install pyarrow (or -e '.[ray]')", file=str(path)) from None
    try:
        frame.to_parquet(path, index=False)
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", file=str(path)) from None
