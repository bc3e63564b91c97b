"""Write measured collective timings in the nccl-tests stdout format that ``simulator calibrate`` reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: nccl-tests bus-bandwidth factor per operation (NVIDIA/nccl-tests doc/PERFORMANCE.md), as a function of ranks n
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
#: sizes of all_gather/reduce_scatter/all_to_all are totals over ranks; nccl-tests' count column is per rank
_PER_RANK_COUNT = {"all_gather", "reduce_scatter", "all_to_all"}
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
_ROOT = {"broadcast": 0, "reduce": 0}
DTYPE_BYTES = {"bfloat16": 2, "half": 2, "float": 4, "double": 8, "int8": 1}


@dataclass(frozen=True)
class Measurement:
    """One size of one operation: the bytes as nccl-tests counts them and the time per call in seconds."""

    size_bytes: int
    time_s: float


def format_log(op: str, ranks: int, rows: Sequence[Measurement], *, dtype: str = "bfloat16",
               comments: Sequence[str] = ()) -> str:
    """The nccl-tests table for ``op`` on ``ranks`` ranks; the one timing fills both column groups (PyTorch runs
    all_reduce in place and the others out of place, so only one variant is measured)."""
    factor = BUSBW_FACTOR[op](ranks)
    elem = DTYPE_BYTES[dtype]
    sizes = [r.size_bytes for r in rows]
    lines = [f"# {op}_perf -b {min(sizes)} -e {max(sizes)} -g 1 -d {dtype}"]
    lines += [f"# {c}" for c in comments]
    lines += ["#",
              "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
              "  (GB/s)"]
    for row in rows:
        count = row.size_bytes // elem // (ranks if op in _PER_RANK_COUNT else 1)
        time_us = row.time_s * 1e6
        algbw = row.size_bytes / row.time_s / 1e9
        busbw = algbw * factor
        timing = f"{time_us:8.2f} {algbw:7.2f} {busbw:7.2f}    N/A"
        lines.append(f"{row.size_bytes:12d}  {count:12d}  {dtype:>8s}  {_REDOP.get(op, 'none'):>6s}  "
                     f"{_ROOT.get(op, -1):6d}  {timing} {timing}")
    return "\n".join(lines) + "\n"


def extract_tuning_table(debug_text: str) -> str:
    """NCCL's printed latency/bandwidth table (``NCCL_DEBUG_SUBSYS=TUNING``) from a debug log, prefixes removed."""
    table = []
    for line in debug_text.splitlines():
        payload = line.split(" NCCL INFO ", 1)[1] if " NCCL INFO " in line else None
        if payload is not None and "|" in payload:
            table.append(payload.rstrip())
    return "\n".join(table) + ("\n" if table else "")
