"""Hostile nccl-tests logs for ``simulator calibrate``, and the one property every calibration must have.

Shared by the hypothesis fuzz (tests/cli/test_fuzz_calibrate.py) and the 10,000-log benchmark
(benchmarks/fuzz_nccl_logs.py). A log is a plausible sweep (the nccl-tests format of simulator.measure, a latency
plus a line rate with noise) with a few hostile edits: a time or size replaced by nan, inf, 0, a negative, a huge or
an unreadable token; a line deleted, duplicated, swapped or cut; a garbage line, non-UTF-8 bytes. The property: the
calibration either raises a located UserError (a file) or gives entries whose every number is finite, with a
latency >= 0 and a bandwidth within the link's line rate, that load back and price a collective to a finite time.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all")
SETTINGS = ("default", "ll", "ll128", "simple", "ring", "tree", "shm")
#: (node profile, ranks, GPUs per node): one node (NVLink, PCIe, host memory) and two nodes (the network)
PLACEMENTS = (("h200_x2", 2, 2), ("dgx_h100", 16, 8), ("rtx3090_x4_pcie", 4, 4))
HOSTILE_TOKENS = ("nan", "NaN", "inf", "-inf", "0", "0.00", "-14.2", "1e999", "1e-300", "1e300", "-0", "abc", "",
                  "1_0", "0x10", "²", "99999999999999999999", "1e18", "N/A")
EDITS = ("time", "size", "delete", "duplicate", "swap", "cut", "garbage", "bytes", "scale")


def base_log(rng: random.Random, op: str, ranks: int) -> list[str]:
    """A plausible nccl-tests log: doubling sizes from 2^a to 2^b bytes, time = latency + size / rate, with noise."""
    from simulator.measure.nccl_tests_format import Measurement, format_log

    first = rng.randint(3, 14)
    count = rng.randint(1, 26)
    latency = rng.uniform(2e-6, 60e-6)
    rate = rng.uniform(5e9, 400e9)
    rows = []
    for i in range(count):
        size = 1 << (first + i)
        time = (latency + size / rate) * rng.uniform(0.9, 1.1)
        rows.append(Measurement(size, time))
    return format_log(op, ranks, rows).splitlines()


def mutate(lines: list[str], rng: random.Random, count: int) -> str | bytes:
    """``lines`` with ``count`` hostile edits, as text (or bytes, when an edit wrote non-UTF-8 bytes)."""
    lines = list(lines)
    raw = b""
    for _ in range(count):
        data = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
        edit = rng.choice(EDITS)
        if edit == "bytes":
            raw = rng.choice([b"\xff\xfe", b"\x89PNG\r\n\x1a\n", b"\xc3("])
        elif edit == "garbage":
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(["12 garbage", "   7", "1 2 3 4 5 6 7 8 9 10 x",
                                                                     "#", "0 " * 20, "x" * 500]))
        elif data and edit == "duplicate":
            i = rng.choice(data)
            lines.insert(i, lines[i])
        elif data and edit == "swap":
            i, j = rng.choice(data), rng.choice(data)
            lines[i], lines[j] = lines[j], lines[i]
        elif data:
            i = rng.choice(data)
            lines[i] = "  ".join(_edit_tokens(lines[i].split(), edit, rng))
    text = "\n".join(lines) + "\n"
    return raw + text.encode() if raw else text


def _edit_tokens(tok: list[str], edit: str, rng: random.Random) -> list[str]:
    """One data line's tokens after a ``time``, ``scale``, ``size``, ``delete`` or ``cut`` edit."""
    if edit in ("time", "scale") and len(tok) >= 6:
        tok[5] = (rng.choice(HOSTILE_TOKENS) if edit == "time"
                  else repr(_number(tok[5]) * rng.choice([1e-9, 1e-3, 0.3, 3.0, 1e6])))
    elif edit == "size":
        tok[0] = rng.choice(["0", "1", "3", "1125899906842625", "99999999999999999999", str(2**40), "７"])
    elif edit == "delete":
        tok = []
    elif edit == "cut":
        tok = tok[: rng.randrange(len(tok))]
    return tok


def check(folder: Path, seed: int) -> str:
    """Write one fuzzed log under ``folder`` and calibrate from it; return 'error' or 'ok', or raise AssertionError
    on a finding (any exception other than UserError propagates: a bug)."""
    from simulator.collectives import (
        calibrate,
        calibration_to_yaml,
        collective_table,
        load_calibration,
        placement_for_profile,
    )
    from simulator.collectives.fit import line_rate_Bps
    from simulator.errors import UserError

    rng = random.Random(seed)
    op, setting = rng.choice(OPS), rng.choice(SETTINGS)
    profile, ranks, per_node = rng.choice(PLACEMENTS)
    content = mutate(base_log(rng, op, ranks), rng, rng.randint(0, 3))
    path = folder / f"{op}_perf.{setting}.txt"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    placement = placement_for_profile(profile, ranks, per_node)
    try:
        calibration, errors = calibrate([path], placement, system=profile)
    except UserError as exc:
        assert exc.file, f"unlocated error: {exc}"
        assert len(str(exc)) < 2000, f"message of {len(str(exc))} characters"
        return "error"
    for e in calibration.entries:
        values = (e.latency_s, e.small_bw_Bps, e.fill_latency_s, e.bandwidth_Bps)
        assert all(math.isfinite(v) for v in values), f"non-finite entry {e}"
        assert e.latency_s >= 0 and e.small_bw_Bps > 0, f"non-physical entry {e}"
        pl = placement.with_shm() if e.link_class == "shm" else placement
        assert e.bandwidth_Bps <= line_rate_Bps(pl, e.link_class)[0], f"faster than the line rate: {e}"
    assert all(math.isfinite(err.max_abs_error) for err in errors)
    (folder / "c.yaml").write_text(calibration_to_yaml(calibration))
    again = load_calibration(folder / "c.yaml")
    rows = collective_table(placement, "all_reduce" if op != "sendrecv" else op, [1 << 10, 1 << 30], "auto", "auto",
                            again)
    assert all(0 < r["time_us"] < math.inf for r in rows), rows
    return "ok"



def _number(token: str) -> float:
    try:
        return float(token)
    except ValueError:
        return 1.0
