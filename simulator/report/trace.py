"""Chrome trace (Trace Event Format, opens in Perfetto and chrome://tracing) of a simulated step.

One process per pipeline stage, one thread per stream: ``compute``, ``host`` (the GPU waiting for an eager
framework to issue its kernels: docs/implementation_profiles.md) and one per communication dimension (``tp comm``,
``cp comm``, ``pp comm``, ``dp comm``, ...). Complete events (``ph: X``) with microsecond times.
"""

from __future__ import annotations

import json
from pathlib import Path

from simulator.schedule import StepResult

_STREAM_ORDER = ("compute", "host", "tp comm", "cp comm", "ulysses comm", "ep comm", "pp comm", "dp comm")
_US = 1e6


def chrome_trace(step_result: StepResult) -> dict:
    """The trace as a JSON-ready dict (``traceEvents`` plus metadata naming processes and threads)."""
    events = step_result.events()
    streams = sorted({e.stream for e in events},
                     key=lambda s: (_STREAM_ORDER.index(s) if s in _STREAM_ORDER else len(_STREAM_ORDER), s))
    tid = {s: i for i, s in enumerate(streams)}
    out: list[dict] = []
    for stage in sorted({e.stage for e in events}):
        out.append({"ph": "M", "name": "process_name", "pid": stage, "tid": 0,
                    "args": {"name": f"pipeline stage {stage}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": stage, "tid": 0, "args": {"sort_index": stage}})
        for s, i in tid.items():
            out.append({"ph": "M", "name": "thread_name", "pid": stage, "tid": i, "args": {"name": s}})
    for e in events:
        if e.dur_s <= 0:
            continue
        out.append({"ph": "X", "name": e.name, "cat": e.stream, "pid": e.stage, "tid": tid[e.stream],
                    "ts": e.start_s * _US, "dur": e.dur_s * _US})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"step_s": step_result.step_s, "critical_stage": step_result.critical_stage}}


def write_chrome_trace(step_result: StepResult, path: str | Path) -> Path:
    """Write the step's Chrome trace JSON to ``path`` and return it."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(step_result)), encoding="utf-8")
    return path
