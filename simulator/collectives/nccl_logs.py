"""Readers for nccl-tests stdout logs and for NCCL's printed tuning table, and NCCL's own tuner prediction."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.errors import UserError

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
    """Parse an nccl-tests stdout log.

    The operation comes from ``op``, else a ``# <name>_perf`` comment line, else the file name
    (``all_reduce_perf.default.txt``); the setting from ``setting`` or the file name's second part (else default).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read measurement file: {err.strerror}", file=str(path)) from err
    found = re.search(r"^#\s*(\w+?)_perf\b", text, re.M)
    name_parts = path.name.split(".")
    from_name = name_parts[0].removesuffix("_perf") if name_parts[0].endswith("_perf") else None
    op = op or (found.group(1) if found else None) or from_name
    if op is None or _op_name(op) not in _OP_NAMES:
        raise UserError(f"cannot tell the operation (no --op, no '# <name>_perf' line, file name {path.name!r})",
                        file=str(path))
    if setting is None:
        setting = name_parts[1] if len(name_parts) > 2 else "default"
    ranks = re.search(r"\branks\s+(\d+)", text)
    n_ranks = int(ranks.group(1)) if ranks else (len(re.findall(r"^#\s+Rank\s+\d+", text, re.M)) or None)
    sizes, times = [], []
    for line_no, line in enumerate(text.splitlines(), 1):
        tok = line.split()
        if not tok or line.lstrip().startswith("#") or not tok[0].isdigit():
            continue
        try:
            time_us = float(tok[-8] if len(tok) >= 11 else tok[-4])
        except (ValueError, IndexError) as err:
            raise UserError(f"unreadable data line: {line.strip()!r}", file=str(path), line=line_no) from err
        sizes.append(float(tok[0]))
        times.append(time_us * 1e-6)
    if not sizes:
        raise UserError("no data lines (size count type ... time algbw busbw) found", file=str(path))
    return Measurement(str(path), _op_name(op), setting, n_ranks, np.array(sizes), np.array(times))


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
