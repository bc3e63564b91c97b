"""Data shipped with the package: hardware profiles and the example scenarios, found with importlib.resources.

In a source checkout ``simulator/data/hardware_profiles`` and ``simulator/data/scenarios`` are relative symlinks to
the repository's top-level ``hardware_profiles/`` and ``scenarios/`` (one copy of the data, edited where users
expect it); a wheel or a plain ``pip install .`` holds the files themselves, so both find the same data.
"""

from __future__ import annotations

import csv
from importlib.resources import files
from pathlib import Path
from typing import Any


def commented_csv(path: Any) -> list[dict[str, str]]:
    """The rows of a CSV data file whose ``#`` lines (its source and assumptions, the header the data files carry)
    and blank lines are not data; ``path``: anything with ``read_text`` (a Path, an importlib.resources file)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return list(csv.DictReader(ln for ln in lines if ln.strip() and not ln.startswith("#")))


def shipped_path(*parts: str) -> Path:
    """Path of ``simulator/data/<parts>`` in the installed package (pip always installs it unpacked)."""
    root = files("simulator")
    if not isinstance(root, Path):
        raise RuntimeError(f"simulator is not installed as files on disk ({root!r}); reinstall it with pip")
    return root.joinpath("data", *parts)


def profile_root() -> Path:
    """The shipped ``hardware_profiles`` folder (``gpus/``, ``nodes/``, ``calibration/``)."""
    return shipped_path("hardware_profiles")


def default_scenario() -> Path:
    """``scenarios/quickstart.yaml``: what ``simulator run`` evaluates when given no scenario."""
    return shipped_path("scenarios", "quickstart.yaml")


def golden_root() -> Path:
    """The shipped regression goldens (``tests/regression/golden`` in a checkout), what ``simulator regress``
    compares the shipped scenarios with."""
    return shipped_path("goldens")


def shipped_scenarios() -> dict[str, Path]:
    """Every shipped scenario by name: its path under ``scenarios/`` without ``.yaml`` (``quickstart``,
    ``multimodal/clip_vit_g14_distmm``), sorted."""
    root = shipped_path("scenarios")
    paths = sorted(root.rglob("*.yaml")) if root.is_dir() else []
    return {path.relative_to(root).with_suffix("").as_posix(): path for path in paths}


def scenario_summary(path: Path) -> dict[str, str]:
    """A shipped scenario's ``name:`` key and one-line description: its ``description:`` key, else the first line of
    its header comment (read as text: listing the scenarios parses none of them)."""
    name = described = ""
    header: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if line.startswith("#") and len(header) == number:
            header.append(line.lstrip("#").strip())
        elif line.startswith("name:") and not name:
            name = line.partition(":")[2].split(" #")[0].strip().strip("'\"")
        elif line.startswith("description:"):
            described = line.partition(":")[2].split(" #")[0].strip().strip("'\"")
    description = described or " ".join(header).split(". ")[0].rstrip(".:") + "."
    if len(description) > 100:
        description = description[:99].rsplit(" ", 1)[0].rstrip(" ,;:(") + " ..."
    return {"name": name, "description": description if description != "." else ""}


def find_scenario(text: str) -> str:
    """``text`` itself when such a file exists (a path always wins), else the shipped scenario it names: a name
    from :func:`shipped_scenarios` with or without ``.yaml``, also under ``scenarios/`` (the README's lines work
    from an installed wheel in any folder). A bare name that is neither raises ``LookupError`` naming the close
    names; any other missing path is returned as given (the loader reports it as not found)."""
    if Path(text).exists():
        return text
    key = text.replace("\\", "/").removeprefix("./").removeprefix("scenarios/").removesuffix(".yaml")
    shipped = shipped_scenarios()
    if key in shipped:
        return str(shipped[key])
    if "/" in text or "\\" in text or Path(text).suffix:
        return text
    import difflib

    close = difflib.get_close_matches(key, shipped, n=5, cutoff=0.5)
    close += [name for name in shipped if key and key in name and name not in close][:5 - len(close)]
    hint = f"; close names: {', '.join(close)}" if close else ""
    raise LookupError(f"no file or shipped scenario named {text[:80]!r}{hint} (`simulator scenarios` lists them)")
