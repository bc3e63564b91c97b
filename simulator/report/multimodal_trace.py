"""Chrome trace of a multimodal step: each submodule's pipeline stages as processes (``vision stage 0``...), placed
on one time axis as the plan composes them (DistMM: at once from 0; uniform: one after the other), then the
exchange, the fill and the loss on a ``loss`` process. Built from :func:`simulator.report.trace.chrome_trace` of
each submodule's engine step, plus the cross-attention and pooler GEMMs the engine's timeline lacks (a process
``<name> outside the engine's timeline`` after each submodule's stages: the step adds their seconds)."""

from __future__ import annotations

import json
from pathlib import Path

from simulator.multimodal.compose import MultimodalStep
from simulator.report.trace import chrome_trace

_US = 1e6
#: pids of one submodule's stages start at index * _PID_BLOCK
_PID_BLOCK = 100


def multimodal_trace(step: MultimodalStep) -> dict:
    events: list[dict] = []
    start = 0.0
    for i, (name, run) in enumerate(step.runs.items()):
        for e in chrome_trace(run.step)["traceEvents"]:
            e = dict(e, pid=i * _PID_BLOCK + e["pid"])
            if e["ph"] == "M" and e["name"] == "process_name":
                e["args"] = {"name": f"{name} {e['args']['name']}"}
            elif e["ph"] == "M" and e["name"] == "process_sort_index":
                e["args"] = {"sort_index": e["pid"]}
            elif e["ph"] == "X":
                e["ts"] += start * _US
            events.append(e)
        events += _extra_gemms(i, name, run, start)
        if step.strategy == "uniform":
            start += run.step_s
    pid = len(step.runs) * _PID_BLOCK
    events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "exchange and loss"}})
    t = step.submodules_s
    for label, dur in (("exchange", step.exchange_s), ("fill", step.fill_s), ("contrastive loss", step.loss_s)):
        if dur > 0:
            events.append({"ph": "X", "name": label, "cat": "loss", "pid": pid, "tid": 0, "ts": t * _US,
                           "dur": dur * _US})
            t += dur
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"step_s": step.step_s, "strategy": step.strategy, "placement": step.placement}}


def _extra_gemms(index: int, name: str, run, start: float) -> list[dict]:
    """The cross-attention and pooler GEMMs the engine's timeline lacks, on a process of their own after it: the
    step adds their seconds (:attr:`SubmoduleRun.step_s`); where they fall inside the pipeline is not modelled."""
    parts = [("cross-attention GEMMs", run.cross_attention_s), ("attentional pooler GEMMs", run.pooler_s)]
    parts = [(label, dur) for label, dur in parts if dur > 0]
    if not parts:
        return []
    pid = index * _PID_BLOCK + _PID_BLOCK - 1
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
            "args": {"name": f"{name} outside the engine's timeline"}},
           {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    t = start + run.step.step_s
    for label, dur in parts:
        out.append({"ph": "X", "name": label, "cat": "compute", "pid": pid, "tid": 0, "ts": t * _US,
                    "dur": dur * _US})
        t += dur
    return out


def write_multimodal_trace(step: MultimodalStep, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(multimodal_trace(step)), encoding="utf-8")
    return path
