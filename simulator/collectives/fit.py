"""Fit a calibration from nccl-tests logs and report the fit error per file.

For each (link class, protocol) the measured times are fitted with the model's two-regime ring form,
``t = max(a_s + b_s*S, a_b + b_b*S)`` (one line when two do not help), minimising squared *relative* error, and
the lines are turned into link parameters through the ring's step counts (docs/collectives.md, Calibration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.collectives import algorithms as alg
from simulator.collectives.calibration import Calibration, CalibrationEntry
from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS, Coefficients
from simulator.collectives.links import link_table
from simulator.collectives.model import build_cost_model, evaluate
from simulator.collectives.nccl_logs import Measurement, parse_nccl_tests
from simulator.collectives.placement import GroupPlacement
from simulator.errors import UserError

_MAX_BW = 1e15  # a flat line: "no measurable per-byte cost"


@dataclass(frozen=True)
class FileError:
    """Fit error of one measurement file (relative errors of predicted vs measured time)."""

    file: str
    op: str
    setting: str
    points: int
    median_abs_error: float
    max_abs_error: float


def setting_context(placement: GroupPlacement, setting: str) -> tuple[GroupPlacement, str, str, str]:
    """(placement, link class, forced protocol or 'auto', forced algorithm or 'auto') for an NCCL setting name."""
    s = setting.lower()
    if s == "shm":
        placement = placement.with_shm()
    link_class = "net" if placement.n_nodes > 1 else placement.intra_transport
    proto = s if s in ("ll", "ll128", "simple") else "auto"
    algo = s if s in ("ring", "tree", "nvls", "nvls_tree", "pat") else "auto"
    return placement, link_class, proto, algo


def _line(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    a, b = np.linalg.lstsq(np.stack([1 / t, x / t], 1), np.ones_like(t), rcond=None)[0]
    if b <= 0:
        return float(np.median(t)), 0.0
    return float(a), float(b)


def fit_two_regime(sizes: np.ndarray, times: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    """Best ``max(line_small, line_big)`` by relative error over all splits of the sorted points (>= 2 each)."""
    order = np.argsort(sizes)
    x, t = sizes[order], times[order]
    one = _line(x, t)
    best = (np.sum(((one[0] + one[1] * x) / t - 1) ** 2), one, one)
    for j in range(2, len(x) - 1):
        s, b = _line(x[:j], t[:j]), _line(x[j:], t[j:])
        pred = np.maximum(s[0] + s[1] * x, b[0] + b[1] * x)
        err = np.sum((pred / t - 1) ** 2)
        if err < best[0] * 0.98:
            best = (err, s, b)
    return best[1], best[2]


def _ring_factors(placement: GroupPlacement, op: str, c: Coefficients) -> tuple[float, float, int]:
    n = placement.n_ranks
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0, 1.0, 0
    nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1
    return nsteps / n, (nsteps + c.ring_pipeline_slack) / n, nsteps


def _entry(m: Measurement, placement: GroupPlacement, link_class: str, proto: str, c: Coefficients) -> CalibrationEntry:
    small, big = fit_two_regime(m.sizes_bytes, m.times_s)
    wire_small, wire_big, nsteps = _ring_factors(placement, m.op, c)
    p = "simple" if proto == "auto" else proto
    ctx = alg.Ctx(placement, c, link_table(placement, c, None))
    steps_latency = alg.ring_latency(ctx, m.op, p, nsteps) - ctx.base("ring", p)
    return CalibrationEntry(
        link_class=link_class, protocol=proto, latency_s=max(small[0] - steps_latency, 0.0),
        small_bw_Bps=min(wire_small / small[1], _MAX_BW) if small[1] > 0 else _MAX_BW,
        fill_latency_s=big[0], bandwidth_Bps=min(wire_big / big[1], _MAX_BW) if big[1] > 0 else _MAX_BW)


def _combine(entries: list[CalibrationEntry]) -> CalibrationEntry:
    if len(entries) == 1:
        return entries[0]
    geo = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
    return entries[0].model_copy(update={
        "latency_s": float(np.mean([e.latency_s for e in entries])),
        "fill_latency_s": float(np.mean([e.fill_latency_s for e in entries])),
        "small_bw_Bps": geo([e.small_bw_Bps for e in entries]), "bandwidth_Bps": geo([e.bandwidth_Bps for e in entries])})


def fit_errors(measurements: list[Measurement], placement: GroupPlacement, calibration: Calibration | None,
               coefficients: Coefficients = DEFAULT_COEFFICIENTS) -> list[FileError]:
    """Relative error of the (calibrated) model on each file, with the file's setting forced."""
    out = []
    for m in measurements:
        pl, _, proto, algo = setting_context(placement, m.setting)
        model = build_cost_model(pl, coefficients, calibration)
        pred = evaluate(model, m.op, m.sizes_bytes, algo, proto).times_s
        err = np.abs(pred / m.times_s - 1)
        out.append(FileError(m.file, m.op, m.setting, len(err), float(np.median(err)), float(err.max())))
    return out


def calibrate(files, placement: GroupPlacement, op: str | None = None, setting: str | None = None,
              coefficients: Coefficients = DEFAULT_COEFFICIENTS, system: str = "") -> tuple[Calibration, list[FileError]]:
    """Fit link parameters from nccl-tests logs for the links ``placement`` uses.

    Files with a forced protocol (ll, ll128, simple) give per-protocol entries; a 'default' file gives an ``auto``
    entry only when its link class has no forced-protocol file; 'shm' files calibrate the shm class.
    Returns the calibration and the fit error of every file (all files, fitted or not).
    """
    measurements = [parse_nccl_tests(f, op, setting) for f in files]
    for m in measurements:
        if m.n_ranks is not None and m.n_ranks != placement.n_ranks:
            raise UserError(f"log has {m.n_ranks} ranks, the placement {placement.n_ranks}", file=m.file)
    groups: dict[tuple[str, str], list[CalibrationEntry]] = {}
    for m in measurements:
        pl, link_class, proto, _ = setting_context(placement, m.setting)
        groups.setdefault((link_class, proto), []).append(_entry(m, pl, link_class, proto, coefficients))
    forced = {cls for cls, proto in groups if proto != "auto"}
    entries = tuple(_combine(v) for (cls, proto), v in sorted(groups.items()) if proto != "auto" or cls not in forced)
    if not entries:
        raise UserError("no measurement could be fitted")
    source = ", ".join(sorted({m.file.rsplit("/", 1)[-1] for m in measurements}))
    calibration = Calibration(system=system, source=f"nccl-tests logs: {source}", entries=entries)
    return calibration, fit_errors(measurements, placement, calibration, coefficients)


def format_errors(errors: list[FileError]) -> str:
    """One line per file: median and max relative error."""
    lines = [f"{'file':48s} {'op':14s} {'setting':8s} {'pts':>4s} {'median':>7s} {'max':>7s}"]
    for e in errors:
        lines.append(f"{e.file.rsplit('/', 1)[-1]:48s} {e.op:14s} {e.setting:8s} {e.points:4d} "
                     f"{100 * e.median_abs_error:6.1f}% {100 * e.max_abs_error:6.1f}%")
    return "\n".join(lines)
