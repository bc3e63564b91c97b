"""Data shipped with the package: hardware profiles and the example scenarios, found with importlib.resources.

In a source checkout ``simulator/data/hardware_profiles`` and ``simulator/data/scenarios`` are relative symlinks to
the repository's top-level ``hardware_profiles/`` and ``scenarios/`` (one copy of the data, edited where users
expect it); a wheel or a plain ``pip install .`` holds the files themselves, so both find the same data.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


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
