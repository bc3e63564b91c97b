"""Parse a number-with-unit string into an SI float of a stated dimension."""

from __future__ import annotations

import math
import re

from simulator.errors import UserError
from simulator.units.constants import BITS_PER_BYTE, GIBI, KIBI, MEBI, TEBI

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": KIBI, "Mi": MEBI, "Gi": GIBI, "Ti": TEBI}


def _size_units() -> dict[str, float]:
    """Byte and bit sizes in bytes: B, kB/KB, MB, GB, TB, KiB..TiB, and b, kb, Mb, Gb, Tb (bits)."""
    units: dict[str, float] = {}
    for prefix, factor in _DECIMAL.items():
        units[f"{prefix}B"] = factor
        units[f"{prefix}b"] = factor / BITS_PER_BYTE
    for prefix, factor in _BINARY.items():
        units[f"{prefix}B"] = float(factor)
        units[f"{prefix}b"] = factor / BITS_PER_BYTE
    units["bytes"] = units["byte"] = 1.0
    units["bits"] = units["bit"] = 1.0 / BITS_PER_BYTE
    return units


_SIZES = _size_units()
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
_FREQUENCIES = {"Hz": 1.0, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9}
_FLOPS = {f"{p}FLOP/s": f for p, f in _DECIMAL.items() if p != "K"} | {
    f"{p}FLOPS": f for p, f in _DECIMAL.items() if p != "K"}
_RATES = {f"{p}/s": f for p, f in _DECIMAL.items() if p not in ("K",)}  # messages or operations per second

#: dimension name -> {unit symbol: factor to SI}; the SI unit of each is named in :data:`SI_UNIT`.
DIMENSIONS: dict[str, dict[str, float]] = {
    "bytes": _SIZES,
    "bandwidth": {f"{u}/s": f for u, f in _SIZES.items()} | {f"{u}ps": f for u, f in _SIZES.items()},
    "time": _TIMES,
    "frequency": _FREQUENCIES,
    "flops": _FLOPS,
    "rate": _RATES,
}
SI_UNIT = {"bytes": "B", "bandwidth": "B/s", "time": "s", "frequency": "Hz", "flops": "FLOP/s", "rate": "1/s"}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d.+-][^\s]*)?\s*$")


def parse_quantity(value: object, dimension: str, *, default_unit: str | None = None) -> float:
    """Return ``value`` as an SI float of ``dimension``.

    Args:
        value: a number (taken in ``default_unit``, or SI when none) or a string such as ``"600 GB/s"``.
        dimension: one of :data:`DIMENSIONS` (``bytes``, ``bandwidth``, ``time``, ``frequency``, ``flops``, ``rate``).
        default_unit: the unit a bare number is in (e.g. ``"GB/s"`` for a field documented in GB/s).

    Raises:
        UserError: the string is not a number with a unit of that dimension (the message lists the accepted units).
    """
    units = DIMENSIONS[dimension]
    if isinstance(value, bool):
        raise UserError(f"expected a {dimension} quantity, got a boolean {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), default_unit
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if not match:
            raise UserError(f"cannot parse {value!r} as a {dimension} quantity "
                            f"(expected a number and a unit, e.g. {_example(dimension)})")
        number, unit = float(match.group(1)), match.group(2) or default_unit
    else:
        raise UserError(f"expected a {dimension} quantity, got {type(value).__name__} {value!r}")
    if not math.isfinite(number):
        raise UserError(f"{value!r} is not a finite number")
    if unit is None:
        return number
    if unit not in units:
        hint = _wrong_dimension_hint(unit)
        raise UserError(f"unknown {dimension} unit {unit!r} in {value!r}{hint}; accepted: "
                        + ", ".join(_shown_units(dimension)))
    return number * units[unit]


def format_quantity(value_si: float, dimension: str, unit: str) -> str:
    """Format an SI float in ``unit`` of ``dimension``, e.g. ``format_quantity(6e11, "bandwidth", "GB/s")``."""
    return f"{value_si / DIMENSIONS[dimension][unit]:g} {unit}"


def _example(dimension: str) -> str:
    return {"bytes": "'80 GiB'", "bandwidth": "'600 GB/s' or '200 Gb/s'", "time": "'1.5 us'",
            "frequency": "'1830 MHz'", "flops": "'989 TFLOP/s'", "rate": "'1.5 M/s'"}[dimension]


def _shown_units(dimension: str) -> list[str]:
    shown = {"bytes": ["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "b", "Kb", "Mb", "Gb", "Tb"],
             "bandwidth": ["B/s", "KB/s", "MB/s", "GB/s", "TB/s", "GiB/s", "Mb/s", "Gb/s", "Tb/s"]}
    return shown.get(dimension, list(DIMENSIONS[dimension]))


def _wrong_dimension_hint(unit: str) -> str:
    for other, units in DIMENSIONS.items():
        if unit in units:
            return f" (that is a {other} unit)"
    return ""
