"""Read a PyTorch profiler (Kineto) Chrome trace: the events ``simulator calibrate --trace`` derives a profile from.

A Kineto trace is the JSON that ``torch.profiler.profile(...).export_chrome_trace(path)`` writes (optionally gzip
compressed): ``{"schemaVersion", "deviceProperties": [{"id", "name", "totalGlobalMem", "numSms", ...}],
"traceEvents": [...]}``. Every event used here is a complete event (``"ph": "X"``) with ``ts`` and ``dur`` in
microseconds and a ``cat``: ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (device activity, ``args``: ``correlation``,
``stream``, ``device``, ``External id``), ``cuda_runtime`` / ``cuda_driver`` (host API calls, ``args``:
``correlation``, ``External id``), ``cpu_op`` (ATen operators, ``args``: ``External id``, ``Input Dims``, ``Input
type`` when recorded with ``record_shapes=True``), ``user_annotation`` (``record_function`` ranges, e.g.
``ProfilerStep#3``, ``Optimizer.step#AdamW.step``) and ``python_function`` (``nn.Module: Name_0`` under
``with_modules=True``). Times become seconds here (SI inside).

Why a reader of our own and not HolisticTraceAnalysis (pip ``HolisticTraceAnalysis`` 0.5.0, the library made
for these traces): its install pulls jupyterlab, plotly, pydot and pytest as run-time requirements, 106 packages
and ~500 MB in a fresh venv (its import: 0.4 s; measured 2026-12-04), for a command that needs one pass over one
JSON document; it reads folders of per-rank traces into pandas frames. The fields read here are ones HTA reads
too (``hta/configs/default_event_args.py``: ``External id``, ``correlation``, ``stream``, ``Input Dims``, ``Input
type``). Parsing is ``json.loads`` (linear in the size) bounded by ``MAX_TRACE_BYTES`` of JSON text (a gzip file is
bounded after decompression, so a small bomb is refused too).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import UserError
from simulator.limits import MAX_TRACE_BYTES
from simulator.units import MICRO

#: device activity categories (their ``kind`` below) and the host categories read
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
#: categories that only a Kineto trace has; a JSON with none of them is another kind of trace
KINETO_CATS = frozenset({*DEVICE_CATS, *RUNTIME_CATS, "cpu_op", "user_annotation", "gpu_user_annotation",
                         "python_function", "ac2g", "cpu_instant_event"})


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """One kernel, memcpy or memset on the GPU (seconds from the trace's clock origin)."""

    name: str
    kind: str            # kernel | memcpy | memset
    start_s: float
    dur_s: float
    stream: int
    correlation: int | None
    external_id: int | None

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class HostEvent:
    """A host-side range: a runtime/driver call, an ATen operator, an annotation or a module call."""

    name: str
    start_s: float
    dur_s: float
    tid: int | str
    correlation: int | None = None
    external_id: int | None = None
    input_dims: tuple = ()
    input_types: tuple = ()

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class Device:
    """``deviceProperties`` entry of the GPU the kernels ran on."""

    name: str
    total_memory_bytes: int | None
    sms: int | None


@dataclass(frozen=True)
class KinetoTrace:
    """The events of one trace, each list sorted by start time."""

    file: str
    sha256: str
    device: Device
    device_events: tuple[DeviceEvent, ...]
    runtime: tuple[HostEvent, ...]
    cpu_ops: tuple[HostEvent, ...]
    annotations: tuple[HostEvent, ...]
    modules: tuple[HostEvent, ...]

    @property
    def kernels(self) -> tuple[DeviceEvent, ...]:
        return tuple(e for e in self.device_events if e.kind == "kernel")


def read_trace(path: str | Path) -> KinetoTrace:
    """The trace at ``path`` (``.json`` or gzip ``.json.gz``, told by the gzip magic bytes, not the name), checked:
    a truncated or malformed JSON, a JSON that is not a Kineto trace, a trace without GPU kernels, kernels of more
    than one device and a file over ``MAX_TRACE_BYTES`` of JSON raise :class:`UserError` naming the file."""
    file = str(path)
    raw = _read_bytes(Path(path))
    text = _decompress(raw, file) if raw[:2] == b"\x1f\x8b" else raw
    if len(text) > MAX_TRACE_BYTES:
        raise UserError(f"over {MAX_TRACE_BYTES:,} bytes of JSON; a trace is limited to {MAX_TRACE_BYTES:,} "
                        "(docs/errors.md): profile fewer steps (torch.profiler schedule active=1)", file=file)
    try:
        doc = json.loads(text)
    except UnicodeDecodeError as err:
        raise UserError(f"not UTF-8 JSON (byte {err.start:,}): not a Chrome trace", file=file) from None
    except json.JSONDecodeError as err:
        stripped = text.rstrip()
        truncated = err.pos >= len(stripped) - 1 or not stripped.endswith((b"}", b"]"))
        cut = "truncated JSON (the file ends inside the document)" if truncated else f"invalid JSON: {err.msg}"
        raise UserError(f"{cut} at column {err.colno}; re-export the trace", file=file, line=err.lineno) from None
    events = _events(doc, file)
    device_events, runtime, cpu_ops, annotations, modules = [], [], [], [], []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        if cat in DEVICE_CATS:
            device_events.append(_device_event(ev, DEVICE_CATS[cat], file, i))
        elif cat in RUNTIME_CATS:
            runtime.append(_host_event(ev, file, i))
        elif cat == "cpu_op":
            cpu_ops.append(_host_event(ev, file, i, shapes=True))
        elif cat == "user_annotation":
            annotations.append(_host_event(ev, file, i))
        elif cat == "python_function" and str(ev.get("name", "")).startswith("nn.Module: "):
            modules.append(_host_event(ev, file, i))
    kernels = [e for e in device_events if e.kind == "kernel"]
    if not kernels:
        raise UserError("no GPU kernels in the trace (cat 'kernel'): profile with "
                        "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU run", file=file)
    key = lambda e: e.start_s  # noqa: E731
    return KinetoTrace(file, hashlib.sha256(raw).hexdigest(), _device(doc, events, file),
                       tuple(sorted(device_events, key=key)), tuple(sorted(runtime, key=key)),
                       tuple(sorted(cpu_ops, key=key)), tuple(sorted(annotations, key=key)),
                       tuple(sorted(modules, key=key)))


def _read_bytes(path: Path) -> bytes:
    try:
        if path.is_dir():
            raise UserError("is a folder, not a trace file", file=str(path))
        with path.open("rb") as f:
            return f.read(MAX_TRACE_BYTES + 1)
    except FileNotFoundError:
        raise UserError("file not found", file=str(path)) from None
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read the trace: {getattr(err, 'strerror', None) or err}", file=str(path)) from None


def _decompress(raw: bytes, file: str) -> bytes:
    """Gzip contents, at most ``MAX_TRACE_BYTES + 1`` of them (a decompression bomb stops there)."""
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            while len(out) <= MAX_TRACE_BYTES and (chunk := f.read(1 << 20)):
                out += chunk
    except EOFError:
        raise UserError("truncated gzip file (it ends before the end-of-stream marker); copy it again", file=file) \
            from None
    except (OSError, zlib.error) as err:
        raise UserError(f"not a readable gzip file: {err}", file=file) from None
    return bytes(out)


def _events(doc, file: str) -> list:
    if isinstance(doc, list):
        raise UserError("a JSON array of events, not a Kineto trace: torch.profiler's export_chrome_trace writes an "
                        "object with 'traceEvents' and 'deviceProperties'", file=file)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UserError("not a Kineto trace: no 'traceEvents' list (export it with torch.profiler's "
                        "export_chrome_trace)", file=file, key_path="traceEvents")
    events = doc["traceEvents"]
    if not any(isinstance(e, dict) and str(e.get("cat", "")).lower() in KINETO_CATS for e in events):
        raise UserError("not a Kineto trace: no event has a PyTorch profiler category (kernel, cuda_runtime, "
                        "cpu_op, ...)", file=file, key_path="traceEvents")
    return events


def _number(ev: dict, key: str, file: str, i: int) -> float:
    value = ev.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or \
            (key == "dur" and value < 0):
        raise UserError(f"{key} {value!r} is not a finite {'non-negative ' if key == 'dur' else ''}number of "
                        "microseconds", file=file, key_path=f"traceEvents[{i}].{key}")
    return float(value)


def _int_arg(args: dict, key: str) -> int | None:
    value = args.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _args(ev: dict) -> dict:
    args = ev.get("args")
    return args if isinstance(args, dict) else {}


def _device_event(ev: dict, kind: str, file: str, i: int) -> DeviceEvent:
    args = _args(ev)
    stream = _int_arg(args, "stream")
    return DeviceEvent(str(ev.get("name", "")), kind, _number(ev, "ts", file, i) * MICRO,
                       _number(ev, "dur", file, i) * MICRO, stream if stream is not None else -1,
                       _int_arg(args, "correlation"), _int_arg(args, "External id"))


def _host_event(ev: dict, file: str, i: int, shapes: bool = False) -> HostEvent:
    args = _args(ev)
    tid = ev.get("tid", 0)
    dims = args.get("Input Dims", ()) if shapes else ()
    types = args.get("Input type", ()) if shapes else ()
    return HostEvent(str(ev.get("name", "")), _number(ev, "ts", file, i) * MICRO, _number(ev, "dur", file, i) * MICRO,
                     tid if isinstance(tid, int | str) else str(tid), _int_arg(args, "correlation"),
                     _int_arg(args, "External id"), tuple(dims) if isinstance(dims, list) else (),
                     tuple(types) if isinstance(types, list) else ())


def _device(doc: dict, events: list, file: str) -> Device:
    """The GPU the kernels ran on: its ``deviceProperties`` entry (one device per trace)."""
    used = {e["args"].get("device") for e in events if isinstance(e, dict) and e.get("cat") == "kernel"
            and isinstance(e.get("args"), dict)} - {None}
    if len(used) > 1:
        raise UserError(f"kernels of {len(used)} devices ({sorted(used, key=str)}): one GPU per trace (export each "
                        "rank's trace on its own)", file=file)
    props = doc.get("deviceProperties")
    if not isinstance(props, list) or not props:
        raise UserError("no 'deviceProperties' (the GPU's name): a trace from torch.profiler with CUDA activity has "
                        "them", file=file, key_path="deviceProperties")
    want = next(iter(used), None)
    entry = next((p for p in props if isinstance(p, dict) and p.get("id") == want), props[0])
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        raise UserError("the device has no name", file=file, key_path="deviceProperties[0].name")
    mem, sms = entry.get("totalGlobalMem"), entry.get("numSms")
    return Device(entry["name"].strip(), mem if isinstance(mem, int) else None, sms if isinstance(sms, int) else None)
