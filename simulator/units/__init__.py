"""Quantities at the edges: parse ``"600 GB/s"``, ``"200 Gb/s"``, ``"80 GiB"``, ``"1.5 us"`` into SI floats.

Inside the simulator every quantity is an SI float: bytes, seconds, bytes/s, FLOP, FLOP/s, Hz. Units appear only
where people type or read numbers (YAML, CLI, reports). Conventions (docs/interface.md): GB = 1e9 B,
GiB = 2**30 B, Gb = 1e9 bits (lower-case ``b`` is a bit, upper-case ``B`` a byte).

Why not pint: it costs ~0.3 s of import time (the package import budget is 0.3 s in total), treats ``b`` as a
unit other than the bit, and brings a registry of thousands of units where we accept five dimensions.
"""

from simulator.units.constants import (
    EXA,
    GB,
    GIBI,
    GIGA,
    KIBI,
    KILO,
    MB,
    MEBI,
    MEGA,
    MICRO,
    MILLI,
    NANO,
    PETA,
    TB,
    TEBI,
    TERA,
    GiB,
    KiB,
    MiB,
    TiB,
)
from simulator.units.parse import DIMENSIONS, format_quantity, parse_quantity

__all__ = [
    "DIMENSIONS", "EXA", "GB", "GIBI", "GIGA", "GiB", "KIBI", "KILO", "KiB", "MB", "MEBI", "MEGA", "MICRO",
    "MILLI", "MiB", "NANO", "PETA", "TB", "TEBI", "TERA", "TiB", "format_quantity", "parse_quantity",
]
