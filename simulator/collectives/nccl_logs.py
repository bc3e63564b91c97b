"""Readers for nccl-tests stdout logs and for NCCL's printed tuning table, and NCCL's own tuner prediction."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.errors import UserError
from simulator.limits import MAX_COLLECTIVE_BYTES, MAX_LOG_BYTES, MAX_LOG_SIZES

_OP_NAMES = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "all_to_all", "sendrecv"}
_NCCL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
             "Broadcast": "broadcast", "Reduce": "reduce"}
_NCCL_ALGOS = {"Tree": "tree", "Ring": "ring", "CollNetDirect": "collnet_direct", "CollNetChain": "collnet_chain",
               "NVLS": "nvls", "NVLSTree": "nvls_tree", "PAT": "pat"}
PROTOS = ("ll", "ll128", "simple")


@dataclass(frozen=True)
class Measurement:
    """One nccl-tests log: operation, NCCL setting, sizes (bytes) and out-of-place times (s)."""

    file: str
    op: str
    setting: str
    n_ranks: int | None
    sizes_bytes: np.ndarray
    times_s: np.ndarray


def _op_name(name: str) -> str:
    return "all_to_all" if name == "alltoall" else name


def parse_nccl_tests(path: str | Path, op: str | None = None, setting: str | None = None) -> Measurement:
    """Parse an nccl-tests stdout log, checked as strictly as a scenario (:func:`check_points`).

    The operation comes from ``op``, else a ``# <name>_perf`` comment line, else the file name
    (``all_reduce_perf.default.txt``); the setting from ``setting`` or the file name's second part (else default).
    The file must be UTF-8 text of at most ``MAX_LOG_BYTES`` (simulator.limits, docs/errors.md). Reading is one pass
    over the lines (linear in the size).
    """
    path = Path(path)
    header = _Header()
    lines, sizes, times = [], [], []
    for line_no, line in enumerate(_read_log(path).splitlines(), 1):
        if header.read(line):
            continue
        tok = line.split()
        if not tok or not _DIGITS.fullmatch(tok[0]):
            continue
        if len(sizes) >= MAX_LOG_SIZES:
            raise UserError(f"more than {MAX_LOG_SIZES:,} data lines (sizes); a log is limited to {MAX_LOG_SIZES:,} "
                            "(docs/errors.md): split the sweep into several files", file=str(path), line=line_no)
        try:
            time_us = float(tok[-8] if len(tok) >= 11 else tok[-4])
        except (ValueError, IndexError) as err:
            raise UserError(f"unreadable data line: {_cut(line.strip())}", file=str(path), line=line_no) from err
        lines.append(line_no)
        sizes.append(float(tok[0]))
        times.append(time_us * 1e-6)
    name_parts = path.name.split(".")
    from_name = name_parts[0].removesuffix("_perf") if name_parts[0].endswith("_perf") else None
    op = op or header.op or from_name
    if op is None or _op_name(op) not in _OP_NAMES:
        raise UserError(f"cannot tell the operation (no --op, no '# <name>_perf' line, file name {_cut(path.name)})",
                        file=str(path))
    if setting is None:
        setting = name_parts[1] if len(name_parts) > 2 else "default"
    if not sizes:
        raise UserError("no data lines (size count type ... time algbw busbw) found", file=str(path))
    check_points(str(path), lines, sizes, times)
    return Measurement(str(path), _op_name(op), setting, header.n_ranks, np.array(sizes), np.array(times))


class _Header:
    """What the comment lines say, read one line at a time (a regex over the whole text per question cost seconds
    on a 16 MiB log): the first ``# <name>_perf``, the first ``ranks N`` (on any line), the ``#  Rank N`` lines."""

    _PERF = re.compile(r"#[ \t]*(\w{1,64}?)_perf\b")
    _RANKS = re.compile(r"\branks[ \t]+(\d{1,9})\b")
    _RANK = re.compile(r"#[ \t]+Rank[ \t]+\d")

    def __init__(self) -> None:
        self.op: str | None = None
        self.ranks: int | None = None
        self.rank_lines = 0

    @property
    def n_ranks(self) -> int | None:
        return self.ranks if self.ranks is not None else (self.rank_lines or None)

    def read(self, line: str) -> bool:
        """Take what ``line`` says; True when it is a comment line (no data)."""
        if self.ranks is None and "ranks" in line and (found := self._RANKS.search(line)):
            self.ranks = int(found.group(1))
        comment = line.lstrip().startswith("#")
        if comment and line.startswith("#"):
            if self.op is None and "_perf" in line and (found := self._PERF.match(line)):
                self.op = found.group(1)
            elif "Rank" in line and self._RANK.match(line):
                self.rank_lines += 1
        return comment


_DIGITS = re.compile(r"[0-9]{1,18}")
#: fewest sizes a log must have: the fitted line has two parameters (latency, bandwidth); a third size is the least
#: that tests it, and nccl-tests' shortest useful sweep (-b 8 -e 128M -f 2 has 25)
MIN_LOG_SIZES = 3
#: a time may fall below the longest time of the smaller sizes by this factor at most: real logs' latency-regime
#: jitter reaches 15% (simulator/validation/data/h200x2_kit/sendrecv_perf.default.txt: 0.85); a time that halves
#: as the size grows is a corrupted or misplaced line, not jitter
MONOTONE_FACTOR = 0.5
#: shortest time a log may hold: nccl-tests prints microseconds with two decimals ("%7.2f"), so 0.01 us is the
#: smallest time it can write that is not 0
MIN_TIME_S = 1e-8


def _cut(text: str, limit: int = 80) -> str:
    """``repr`` of ``text`` cut to ``limit`` characters (a message names the value, never floods the terminal)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _read_log(path: Path) -> str:
    try:
        if path.is_dir():
            raise UserError("is a folder, not an nccl-tests log", file=str(path))
        with path.open("rb") as f:
            data = f.read(MAX_LOG_BYTES + 1)
    except FileNotFoundError:
        raise UserError("file not found", file=str(path)) from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the name
        raise UserError(f"cannot read measurement file: {getattr(err, 'strerror', None) or err}",
                        file=str(path)) from None
    if len(data) > MAX_LOG_BYTES:
        raise UserError(f"file is over {MAX_LOG_BYTES:,} bytes; nccl-tests logs are limited to {MAX_LOG_BYTES:,} "
                        "(docs/errors.md)", file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"not a UTF-8 text file (byte {err.start:,} is not UTF-8): an nccl-tests log is the "
                        "program's text output", file=str(path)) from None


def check_points(file: str, lines: list[int], sizes: list[float], times_s: list[float]) -> None:
    """Refuse what no nccl-tests run can print, naming the file and line: a size that is not a positive number of
    bytes up to 1 PiB or does not grow from one line to the next (nccl-tests prints a sweep in increasing order; two
    runs go in two files), a time that is not finite or below ``MIN_TIME_S``, a time below ``MONOTONE_FACTOR`` of a smaller
    size's, and fewer than ``MIN_LOG_SIZES`` sizes."""
    longest = 0.0
    for i, (line, size, t) in enumerate(zip(lines, sizes, times_s, strict=True)):
        if not 1 <= size <= MAX_COLLECTIVE_BYTES:
            raise UserError(f"size {size:.0f} bytes: a size must be between 1 byte and 1 PiB", file=file, line=line)
        if i and size <= sizes[i - 1]:
            raise UserError(f"size {size:.0f} bytes after {sizes[i - 1]:.0f} on line {lines[i - 1]}: sizes must grow "
                            "line by line (nccl-tests prints a sweep in increasing order; put separate runs in "
                            "separate files)", file=file, line=line)
        if not (math.isfinite(t) and t >= MIN_TIME_S):
            raise UserError(f"time {t * 1e6:g} us at size {size:.0f}: a time must be a finite number of "
                            f"microseconds, at least {MIN_TIME_S * 1e6:g} (the smallest nccl-tests prints)",
                            file=file, line=line)
        if t < MONOTONE_FACTOR * longest:
            raise UserError(f"time {t * 1e6:g} us at size {size:.0f} is less than {MONOTONE_FACTOR:g} x the "
                            f"{longest * 1e6:g} us of a smaller size: a larger message cannot take that much less "
                            "time (a corrupted or misplaced line?)", file=file, line=line)
        longest = max(longest, t)
    if len(sizes) < MIN_LOG_SIZES:
        raise UserError(f"{len(sizes)} size(s); a fit needs at least {MIN_LOG_SIZES} (two parameters and one size "
                        "to check them)", file=file)


@dataclass(frozen=True)
class TuningTable:
    """NCCL's printed model: ``entries[op][algo][proto] = (latency_us, algbw_GBps)``; bw 0 means disabled."""

    entries: dict[str, dict[str, dict[str, tuple[float, float]]]]


def parse_tuning_table(path: str | Path) -> TuningTable:
    """Parse the table NCCL prints with NCCL_DEBUG_SUBSYS=TUNING (blocks of 'Algorithm | A | B | C |')."""
    entries: dict = {}
    algos: list[str] = []
    for line in Path(path).read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 2:
            continue
        head = cells[0]
        if head == "Algorithm":
            algos = [_NCCL_ALGOS.get(c, c.lower()) for c in cells[1:] if c]
        elif head in _NCCL_OPS:
            values = [c for c in cells[1:] if c]
            for i, v in enumerate(values):
                a, p = i // 3, PROTOS[i % 3]
                if a >= len(algos):
                    break
                lat, bw = (float(x) for x in v.split("/"))
                entries.setdefault(_NCCL_OPS[head], {}).setdefault(algos[a], {})[p] = (lat, bw)
    return TuningTable(entries)


# NCCL src/graph/tuning.cc v2.30.7 treeCorrectionFactor[proto][log2(nBytes/64)], indices 0 (64 B) .. 23 (512 MB).
TREE_CORRECTION = {
    "ll": [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0],
    "ll128": [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0],
    "simple": [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9],
}


def nccl_tuner_time(table: TuningTable, op: str, size_bytes: float, protocols=PROTOS) -> float:
    """NCCL's predicted time (s): the argmin of lat + nBytes/(1000*bw) over enabled entries (enqueue.cc), with the
    tree all_reduce size correction (tuning.cc ncclTopoGetAlgoTime)."""
    best = math.inf
    for algo, by_proto in table.entries.get(op, {}).items():
        for proto, (lat, bw) in by_proto.items():
            if bw <= 0 or proto not in protocols:
                continue
            if algo == "tree" and op == "all_reduce":
                idx = int(math.log2(max(size_bytes, 64) // 64))
                if idx <= 22:
                    bw *= TREE_CORRECTION[proto][idx]
            best = min(best, lat + size_bytes / (1000.0 * bw))
    return best * 1e-6
