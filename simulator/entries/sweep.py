"""Sweeps: one scenario file, many plans.

``sweep:`` maps dotted keys to value lists (their cartesian product); ``zip:`` maps dotted keys to lists of one
length that move together (one more axis of the product). Every point is a full scenario (the file with the
point's values set); a point that fails validation becomes a row with the reason, never a crash.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.entries.simulate import simulate
from simulator.errors import UserError
from simulator.limits import MAX_SWEEP_PLANS
from simulator.scenario.document import Document, read_document, set_dotted
from simulator.scenario.load import check_sections_not_empty, scenario_from_document
from simulator.scenario.sweep_check import check_calibration, check_values

#: spread a sweep over processes from this many points on (below it, start-up costs more than it saves)
PARALLEL_FROM_POINTS = 200


@dataclass(frozen=True)
class SweepPlan:
    """The base document and the list of points (each a mapping of dotted key -> value)."""

    document: Document
    keys: tuple[str, ...]
    points: tuple[dict[str, Any], ...]


def plan_sweep(source: str | Path | dict, max_plans: int = MAX_SWEEP_PLANS,
               force_calibration: bool = False) -> SweepPlan:
    """Read a sweep file and expand ``sweep:`` x ``zip:`` into points, after checking every key and value against
    the scenario schema, that no key is in both sections, that there are at most ``max_plans`` points, and that a
    fixed calibration was measured on the fixed system (``force_calibration`` applies it anyway)."""
    document = read_document(source)
    if force_calibration and isinstance(document.data.get("system"), dict):
        document.data["system"]["force_calibration"] = True
    data = dict(document.data)
    _check_sections(document)
    sweep = data.pop("sweep", None) or {}
    zipped = data.pop("zip", None) or {}
    for section, value in (("sweep", sweep), ("zip", zipped)):
        if not isinstance(value, dict):
            raise document.locate(UserError("expected a mapping of dotted keys to value lists", key_path=section))
        for key, values in value.items():
            _check_axis(document, section, key, values)
    _check_overlap(document, sweep, zipped)
    lengths = {len(v) for v in zipped.values()}
    if len(lengths) > 1:
        raise document.locate(UserError(f"zip lists must have one length, got {sorted(lengths)}", key_path="zip"))
    _check_count(document, sweep, zipped, max_plans)
    check_calibration(document, tuple(sweep) + tuple(zipped))
    axes = [[{k: v} for v in values] for k, values in sweep.items()]
    if zipped:
        axes.append([dict(zip(zipped, combo, strict=True)) for combo in zip(*zipped.values(), strict=True)])
    points = tuple({k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes))
    return SweepPlan(Document(data, document.file, document.origins), tuple(sweep) + tuple(zipped), points)


def count_plans(sweep: dict, zipped: dict) -> int:
    """Points of ``sweep`` x ``zip`` without building them."""
    return math.prod(len(v) for v in sweep.values()) * (len(next(iter(zipped.values()))) if zipped else 1)


def _check_count(document: Document, sweep: dict, zipped: dict, max_plans: int) -> None:
    count = count_plans(sweep, zipped)
    if count > max_plans:
        sizes = " x ".join([str(len(v)) for v in sweep.values()] + ([f"zip {len(next(iter(zipped.values())))}"]
                                                                     if zipped else []))
        raise document.locate(UserError(f"{sizes} = {count:,} plans, more than --max-plans {max_plans:,} "
                                        "(docs/errors.md)", key_path="sweep" if sweep else "zip"))


def _check_sections(document: Document) -> None:
    """A sweep file names at least one swept key: a file without ``sweep:`` or ``zip:`` is one plan (``simulator
    run``), and an empty section is surely a mistake (a sweep of one plan, the base, without a word)."""
    data = document.data
    if "sweep" not in data and "zip" not in data:
        raise UserError("no sweep: or zip: section, so there is nothing to sweep: add `sweep:` with dotted keys and "
                        "value lists (docs/scenarios.md, Sweeps), or run the one plan with `simulator run`", file=document.file)
    check_sections_not_empty(document)


def _check_overlap(document: Document, sweep: dict, zipped: dict) -> None:
    for key in sweep.keys() & zipped.keys():
        _, sweep_line = document.where(f"sweep.{key}")
        raise document.locate(UserError(f"{key} is in both sweep: (line {sweep_line}) and zip:; give each key in "
                                        "one of them", key_path=f"zip.{key}"))


def _check_axis(document: Document, section: str, key: str, values: Any) -> None:
    path = f"{section}.{key}"
    if not isinstance(values, list) or not values:
        raise document.locate(UserError("expected a non-empty list of values", key_path=path))
    if key in ("sweep", "zip") or key.split(".", 1)[0] in ("sweep", "zip"):
        raise document.locate(UserError(f"{key!r} cannot be swept", key_path=path))
    try:
        check_values(key, values, path)
    except UserError as exc:
        raise document.locate(exc if exc.key_path else UserError(exc.message, key_path=path)) from None


def point_document(plan: SweepPlan, point: dict[str, Any]) -> Document:
    """The base document with one point's values set."""
    import copy

    data = copy.deepcopy(plan.document.data)
    for key, value in point.items():
        set_dotted(data, key, value)
    return Document(data, plan.document.file, plan.document.origins)


def evaluate_point(plan: SweepPlan, point: dict[str, Any]) -> dict[str, Any]:
    """One row: the point's values, ``status`` (ok, oom, invalid), ``reason`` and the result's summary."""
    row: dict[str, Any] = dict(point)
    try:
        scenario = scenario_from_document(point_document(plan, point))
        result = simulate(scenario)
    except UserError as exc:
        row.update(status="invalid", reason=str(exc))
        return row
    summary = result.summary()
    row.update(status="oom" if summary["memory.oom"] else "ok", reason="")
    row.update(summary)
    return row


def run_sweep(plan: SweepPlan, *, processes: int | None = None,
              progress: Callable[[Iterator], Iterator] | None = None) -> list[dict[str, Any]]:
    """Evaluate every point (in ``processes`` worker processes for large sweeps); rows keep the points' order."""
    points = plan.points
    workers = processes if processes is not None else (os.cpu_count() or 1)
    wrap = progress or (lambda it: it)
    if workers <= 1 or len(points) < PARALLEL_FROM_POINTS:
        return list(wrap(evaluate_point(plan, p) for p in points))
    from concurrent.futures import ProcessPoolExecutor

    chunk = max(1, len(points) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(wrap(pool.map(_evaluate_indexed, [(plan, p) for p in points], chunksize=chunk)))


def _evaluate_indexed(args: tuple[SweepPlan, dict[str, Any]]) -> dict[str, Any]:
    return evaluate_point(*args)
