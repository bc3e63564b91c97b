"""Argument types shared by the subcommands: every number's range and every output path is checked by argparse,
before any work is done (argparse reports a bad value with exit status 2)."""

from __future__ import annotations

import argparse
import os

#: matplotlib's savefig formats (``FigureCanvasBase.get_supported_filetypes()``; a test keeps the two equal),
#: listed here so that checking ``--plot`` does not import matplotlib
PLOT_FORMATS = ("avif", "eps", "gif", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif",
                "tiff", "webp")


def bounded_int(low: int, high: int | None = None, what: str = "an integer"):
    """argparse type: an integer in ``[low, high]`` (``high`` None: no upper bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            upper = f", at most {high:,}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"expected {what} (at least {low}{upper}), got {value:,}")
        return value

    parse.__name__ = "integer"
    return parse


positive_int = bounded_int(1, what="a positive integer")
non_negative_int = bounded_int(0, what="a non-negative integer")


def output_path(text: str) -> str:
    """argparse type: a file to write, whose folder must exist and which is not itself a folder."""
    from pathlib import Path

    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: it is a folder, not a file")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: permission denied")
    return text


def plot_path(text: str) -> str:
    """argparse type: an image file to write; its extension must be a matplotlib format."""
    from pathlib import Path

    text = output_path(text)
    suffix = Path(text).suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(
            f"cannot draw {text!r}: the extension must be one of {', '.join(PLOT_FORMATS)} (got {suffix or 'none'!r})")
    return text


def scenario_path(text: str) -> str:
    """argparse type: a scenario file, or the name of a shipped scenario where no such file exists (``quickstart``,
    ``scenarios/quickstart.yaml`` from any folder); an unknown bare name is refused with the close names."""
    from simulator.resources import find_scenario

    try:
        return find_scenario(text)
    except LookupError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
