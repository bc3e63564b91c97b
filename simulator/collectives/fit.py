"""Fit a calibration from nccl-tests logs and report the fit error per file.

For each (link class, protocol) the measured times are fitted with the model's two-regime ring form,
``t = max(a_s + b_s*S, a_b + b_b*S)`` (one line when two do not help), minimising squared *relative* error, and
the lines are turned into link parameters through the ring's step counts (docs/collectives.md, Calibration).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.arrays import distinct
from simulator.collectives import algorithms as alg
from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS, Coefficients
from simulator.collectives.curves import pool_points
from simulator.collectives.model import build_cost_model, evaluate
from simulator.collectives.nccl_logs import Measurement, parse_nccl_tests
from simulator.collectives.placement import GroupPlacement
from simulator.errors import UserError
from simulator.hardware.calibration import Calibration, CalibrationEntry

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


P2P_OPS = ("sendrecv", "all_to_all")


def op_path(op: str) -> str:
    """The NCCL channels an operation runs on: ``p2p`` (sendrecv, all_to_all) or ``collective``."""
    return "p2p" if op in P2P_OPS else "collective"


def setting_context(placement: GroupPlacement, setting: str, op: str = "all_reduce") -> tuple[GroupPlacement, str, str, str]:
    """(placement, link class, protocol, algorithm) that NCCL actually runs ``op`` with under a setting name.

    ``shm`` (NCCL_P2P_DISABLE=1) moves the intra-node link to host memory for every operation. NCCL_PROTO and
    NCCL_ALGO tune collectives only: NCCL's point-to-point path picks LL up to NCCL_P2P_LL_THRESHOLD and Simple above
    whatever NCCL_PROTO says (it has no LL128), and has no algorithm choice, so for sendrecv and all_to_all a forced
    protocol or algorithm maps to ``auto`` (a sendrecv log taken under ``ll128`` is a valid p2p measurement).
    """
    s = setting.lower()
    if s == "shm":
        placement = placement.with_shm()
    link_class = "net" if placement.n_nodes > 1 else placement.intra_transport
    if op_path(op) == "p2p":
        return placement, link_class, "auto", "auto"
    proto = s if s in ("ll", "ll128", "simple") else "auto"
    algo = s if s in ("ring", "tree", "nvls", "nvls_tree", "pat") else "auto"
    return placement, link_class, proto, algo


def _line(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    a, b = np.linalg.lstsq(np.stack([1 / t, x / t], 1), np.ones_like(t), rcond=None)[0]
    if b <= 0:
        return float(np.median(t)), 0.0
    return float(a), float(b)


#: most split points :func:`fit_two_regime` tries: a doubling sweep (-f 2) from 1 B to 1 PiB has 51 sizes, so every
#: split of every real doubling sweep is tried; a denser (stepped, -i) sweep is tried at this many sizes spaced evenly
#: in log(size), which keeps the fit linear in the number of sizes
MAX_SPLITS = 64


def split_points(x: np.ndarray) -> np.ndarray:
    """Indices ``j`` (2 <= j <= n-2) where :func:`fit_two_regime` may split sorted sizes ``x``: all of them up to
    ``MAX_SPLITS``, else ``MAX_SPLITS`` of them evenly spaced in log(size)."""
    n = len(x)
    every = np.arange(2, n - 1)
    if len(every) <= MAX_SPLITS:
        return every
    marks = np.geomspace(x[2], x[n - 2], MAX_SPLITS)
    return distinct(np.clip(np.searchsorted(x, marks), 2, n - 2))


def fit_two_regime(sizes: np.ndarray, times: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    """Best ``max(line_small, line_big)`` by relative error over the splits of the sorted points (>= 2 each) that
    :func:`split_points` names; O(MAX_SPLITS x points)."""
    order = np.argsort(sizes)
    x, t = sizes[order], times[order]
    one = _line(x, t)
    best = (np.sum(((one[0] + one[1] * x) / t - 1) ** 2), one, one)
    for j in split_points(x):
        s, b = _line(x[:j], t[:j]), _line(x[j:], t[j:])
        pred = np.maximum(s[0] + s[1] * x, b[0] + b[1] * x)
        err = np.sum((pred / t - 1) ** 2)
        if err < best[0] * 0.98:
            best = (err, s, b)
    return best[1], best[2]


def _probe_row(placement: GroupPlacement, op: str, path: str, link_class: str, proto: str, algo: str,
               c: Coefficients) -> alg.Row:
    """The model's row for ``op`` with a unit calibration (1 B/s, zero latencies) on ``link_class``: its terms are
    the row's structure (wire bytes per nccl-tests byte, latency steps added to the entry's latency), so fitted
    lines turn into entry parameters whatever the operation."""
    unit = CalibrationEntry(link_class=link_class, protocol=proto, path=path, latency_s=0.0, small_bw_Bps=1.0,
                            fill_latency_s=0.0, bandwidth_Bps=1.0)
    model = build_cost_model(placement, c, Calibration(entries=(unit,)))
    table = model.tables[op]
    p = "simple" if proto == "auto" else proto
    a = ("direct" if path == "p2p" else "ring") if algo == "auto" else algo
    rows = list(zip(table.algorithms, table.protocols, strict=True))
    if (a, p) not in rows:
        raise UserError(f"{op} has no {a} algorithm with the {p} protocol on this group (it has: "
                        f"{', '.join(sorted({x for x, _ in rows}))}): the log's setting cannot be fitted")
    i = rows.index((a, p))
    lat_small, inv_small, lat_big, inv_big = table.terms[i, :4]
    if not np.all(np.isfinite(table.terms[i, :4])):
        raise UserError(f"{op} with {a}/{p} cannot run on this group ({placement.intra_transport}, "
                        f"{placement.gpu_arch}; NCCL disables it): the log's setting cannot be fitted")
    return alg.Row(a, p, lat_small, inv_small, lat_big, inv_big)


def _entry(m: Measurement, placement: GroupPlacement, link_class: str, proto: str, algo: str,
           c: Coefficients) -> CalibrationEntry:
    path = op_path(m.op)
    small, big = fit_two_regime(m.sizes_bytes, m.times_s)
    if big[1] <= 0:
        raise UserError(f"{m.op} times do not grow with the size at the largest sizes ({m.sizes_bytes[-1]:.0f} "
                        "bytes): no link bandwidth can be fitted (is the sweep long enough to leave the latency "
                        "regime?)", file=m.file)
    probe = _probe_row(placement, m.op, path, link_class, proto, algo, c)
    if small[0] < 0:
        raise UserError(f"negative latency: the small sizes' times extrapolate to {small[0] * 1e6:.3g} us at 0 bytes "
                        f"(a latency below zero); check the log's times", file=m.file)
    # an intercept below the model's own step latencies (a forced protocol's ring over the network counts more
    # steps than NCCL's small-message choice runs) leaves the base latency at 0: the steps already cover the time
    latency = max(small[0] - probe.lat_small_s, 0.0)
    scale = placement.nic_sharing if link_class == "net" else 1  # link_table divides net entries by the sharing
    # one-node p2p: keep the measured points, as (bytes per exchange, seconds), for the model to interpolate
    curve = (tuple((float(x * probe.inv_big), float(t)) for x, t in zip(m.sizes_bytes, m.times_s, strict=True))
             if path == "p2p" and link_class != "net" else ())
    bandwidth = min(probe.inv_big / big[1], _MAX_BW) * scale
    if small == big:  # one line: the latency regime has no slope of its own, it sees the bandwidth regime's link
        small_bw = bandwidth
    else:
        small_bw = min(probe.inv_small / small[1], _MAX_BW) * scale if small[1] > 0 else _MAX_BW
    return CalibrationEntry(
        link_class=link_class, protocol=proto, path=path, latency_s=latency,
        small_bw_Bps=small_bw, fill_latency_s=big[0] - probe.lat_big_s, bandwidth_Bps=bandwidth, curve=curve)


def line_rate_Bps(placement: GroupPlacement, link_class: str) -> tuple[float, str]:
    """(bytes/s per direction, what it is) that no fitted ``bandwidth_Bps`` of ``link_class`` can exceed: the GPU's
    NVLink (links x per-link rate) or PCIe link (pcie_p2p; shm, staged over PCIe), or the node's NICs together (net:
    a net entry is the node's bandwidth, link_table divides it among the groups sharing the NICs)."""
    if link_class == "net":
        return (placement.nics_per_node * placement.nic_bw_Bps,
                f"the line rate of the node's {placement.nics_per_node} NIC(s)")
    what = {"nvlink": "the GPU's NVLink line rate", "pcie_p2p": "the GPU's PCIe link", "shm": "the GPU's PCIe link"}
    return placement.intra_bw_Bps, what[link_class]


def physical_problem(entry: CalibrationEntry, placement: GroupPlacement) -> str | None:
    """Why a fitted entry cannot describe real hardware (None when it can): a parameter that is not finite, or a
    bandwidth-regime bandwidth above :func:`line_rate_Bps`. ``small_bw_Bps`` is an effective slope of the latency
    regime, not a link rate (real 2x H200 logs fit up to 1.35 TB/s on a 450 GB/s NVLink:
    simulator/validation/data/h200x2/all_gather_perf.simple.txt), so it is only required to be finite."""
    values = entry.model_dump(include={"latency_s", "small_bw_Bps", "fill_latency_s", "bandwidth_Bps"})
    bad = [f"{k}={v}" for k, v in values.items() if not math.isfinite(v)]
    if bad:
        return f"{', '.join(bad)} is not finite"
    limit, what = line_rate_Bps(placement, entry.link_class)
    if entry.bandwidth_Bps > limit:
        hint = (" (an all_reduce that ran NVLS or a tree looks faster than a ring can: use NCCL_ALGO=Ring or "
                "NCCL_NVLS_ENABLE=0 runs, or name the setting)" if entry.link_class == "nvlink" else "")
        return (f"{entry.link_class} {entry.protocol} bandwidth {entry.bandwidth_Bps / 1e9:,.1f} GB/s is faster than "
                f"{what} ({limit / 1e9:,.1f} GB/s per direction){hint}")
    return None


def _combine(entries: list[CalibrationEntry]) -> CalibrationEntry:
    if len(entries) == 1:
        return entries[0]
    geo = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
    return entries[0].model_copy(update={
        "latency_s": float(np.mean([e.latency_s for e in entries])),
        "fill_latency_s": float(np.mean([e.fill_latency_s for e in entries])),
        "small_bw_Bps": geo([e.small_bw_Bps for e in entries]), "bandwidth_Bps": geo([e.bandwidth_Bps for e in entries]),
        "curve": pool_points([list(e.curve) for e in entries]) if any(e.curve for e in entries) else ()})


def fit_errors(measurements: list[Measurement], placement: GroupPlacement, calibration: Calibration | None,
               coefficients: Coefficients = DEFAULT_COEFFICIENTS) -> list[FileError]:
    """Relative error of the (calibrated) model on each file, with the file's setting forced."""
    out = []
    for m in measurements:
        pl, _, proto, algo = setting_context(placement, m.setting, m.op)
        model = build_cost_model(pl, coefficients, calibration)
        pred = evaluate(model, m.op, m.sizes_bytes, algo, proto).times_s
        err = np.abs(pred / m.times_s - 1)
        out.append(FileError(m.file, m.op, m.setting, len(err), float(np.median(err)), float(err.max())))
    return out


def calibrate(files, placement: GroupPlacement, op: str | None = None, setting: str | None = None,
              coefficients: Coefficients = DEFAULT_COEFFICIENTS, system: str = "") -> tuple[Calibration, list[FileError]]:
    """Fit link parameters from nccl-tests logs for the links ``placement`` uses.

    Collective files (all_reduce, all_gather, reduce_scatter, broadcast, reduce) give ``path: collective``
    entries: with a forced protocol (ll, ll128, simple) per-protocol entries; 'default' (and 'ring', 'tree') files an
    ``auto`` entry only when their link class has no forced-protocol file. Point-to-point files (sendrecv,
    all_to_all) give ``path: p2p`` entries, ``auto`` whatever the setting (NCCL_PROTO does not apply to p2p).
    'shm' files calibrate the shm class. Files of one (link class, protocol, path) are fitted one by one and
    their parameters pooled (mean latencies, geometric-mean bandwidths).
    Returns the calibration and the fit error of every file (all files, fitted or not).
    """
    measurements = [parse_nccl_tests(f, op, setting) for f in files]
    for m in measurements:
        if m.n_ranks is not None and m.n_ranks != placement.n_ranks:
            raise UserError(f"log has {m.n_ranks} ranks, the placement {placement.n_ranks}", file=m.file)
    groups: dict[tuple[str, str, str], list[CalibrationEntry]] = {}
    files: dict[tuple[str, str, str], list[str]] = {}
    places: dict[tuple[str, str, str], GroupPlacement] = {}
    for m in measurements:
        pl, link_class, proto, algo = setting_context(placement, m.setting, m.op)
        try:
            entry = _entry(m, pl, link_class, proto, algo, coefficients)
        except UserError as err:
            raise err.located(file=m.file) from None
        key = (entry.path, link_class, proto)
        groups.setdefault(key, []).append(entry)
        files.setdefault(key, []).append(m.file)
        places[key] = pl
    forced = {(path, cls) for path, cls, proto in groups if proto != "auto"}
    kept = [k for k in sorted(groups) if k[2] != "auto" or k[:2] not in forced]
    entries = tuple(_combine(groups[k]) for k in kept)
    for k, entry in zip(kept, entries, strict=True):
        problem = physical_problem(entry, places[k])
        if problem:
            raise UserError(f"refused: {problem}; fitted from {', '.join(files[k])}", file=files[k][0])
    if not entries:
        raise UserError("no measurement could be fitted")
    source = ", ".join(sorted({m.file.rsplit("/", 1)[-1] for m in measurements}))
    calibration = Calibration(system=system, source=f"nccl-tests logs: {source}", entries=entries)
    errors = fit_errors(measurements, placement, calibration, coefficients)
    for e in errors:
        if not math.isfinite(e.max_abs_error):
            raise UserError("refused: the fitted model predicts a time that is not finite for this log", file=e.file)
    return calibration, errors


def format_errors(errors: list[FileError]) -> str:
    """One line per file: median and max relative error."""
    lines = [f"{'file':48s} {'op':14s} {'setting':8s} {'pts':>4s} {'median':>7s} {'max':>7s}"]
    for e in errors:
        lines.append(f"{e.file.rsplit('/', 1)[-1]:48s} {e.op:14s} {e.setting:8s} {e.points:4d} "
                     f"{100 * e.median_abs_error:6.1f}% {100 * e.max_abs_error:6.1f}%")
    return "\n".join(lines)
