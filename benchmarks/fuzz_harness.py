"""What the fuzz benchmarks share (fuzz_scenarios.py, fuzz_nccl_logs.py): one check per seed under a wall-clock
alarm in worker processes, and the summary they print (counts, the slowest run, each distinct finding with a seed
that reproduces it)."""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Callable

#: by default a run longer than this is a finding (``--seconds``; the test suite passes 0: no time limit, so a
#: loaded machine cannot fail a functional check)
SECONDS = 10
#: the limit in this worker, set by :func:`install_alarm`; 0: none
_limit = SECONDS


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout


def install_alarm(seconds: int = SECONDS) -> None:
    """In a worker: SIGALRM raises :class:`Timeout` after ``seconds`` of one check (0: no alarm)."""
    global _limit
    _limit = seconds
    signal.signal(signal.SIGALRM, _alarm)


def timed_check(check: Callable[[], str], label: str = "") -> tuple[str, float, str]:
    """(outcome, seconds, finding text) of ``check()`` under the alarm: its outcome (``ok`` or ``error``, a located
    user error), or ``finding`` for a run over the worker's limit (:func:`install_alarm`), out of memory or any other exception; ``label``
    prefixes the finding (the input's name)."""
    prefix = f"{label}: " if label else ""
    start = time.perf_counter()
    signal.alarm(_limit)
    try:
        outcome, finding = check(), ""
    except Timeout:
        outcome, finding = "finding", f"{prefix}over {_limit} s"
    except MemoryError:
        outcome, finding = "finding", f"{prefix}out of memory"
    except Exception as exc:  # noqa: BLE001 - every other exception is a finding
        outcome, finding = "finding", f"{prefix}{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        try:
            signal.alarm(0)
        except Timeout:  # the alarm fired between the end of the check and this line: the run finished in time
            pass
    return outcome, time.perf_counter() - start, finding


def summary(rows: list[tuple], what: str, elapsed_s: float, workers: int) -> tuple[list[str], bool]:
    """The lines to print for ``rows`` of (seed, outcome, seconds, ..., finding) and whether there was a finding."""
    counts = collections.Counter(r[1] for r in rows)
    findings: dict[str, int] = {}
    for row in rows:
        if row[1] == "finding":
            findings.setdefault(row[-1], row[0])
    slowest = max(rows, key=lambda r: r[2])
    lines = [f"{len(rows)} {what} in {elapsed_s:.1f} s on {workers} workers: {counts['ok']} ok, "
             f"{counts['error']} located user errors, {counts['finding']} findings",
             f"slowest {slowest[2]:.2f} s (seed {slowest[0]})"]
    lines += [f"finding (seed {seed}): {finding}" for finding, seed in findings.items()]
    return lines, bool(findings)
