"""What one rank's checkpoint save costs on the H200 host: device-to-host staging and torch.save / DCP save to disk.

    python3 benchmarks/device/checkpoint_save.py --out $OUT/checkpoint_save.jsonl --dir /tmp/ckpt_bench

A GPU state dict of ``--gb`` gigabytes (fp32 tensors of 64 MiB, the size of a large layer's weight or Adam moment)
is saved the ways a training framework saves it, each timed with ``time.perf_counter`` after ``torch.cuda.synchronize``
(host wall time, which is what a save stalls), one warm-up pass at the smallest size first, then ``--repeats``
repeats per size; one JSON row per size with the median, min and max of each part (seconds) and its rate (GB/s):

* ``pageable_copy``: ``{k: v.cpu()}``, a device-to-host copy into fresh pageable memory (what ``torch.save`` of a
  GPU tensor and DeepSpeed's per-rank save do first);
* ``pinned_alloc``: ``torch.empty(..., pin_memory=True)`` for every tensor (cudaHostAlloc; what DCP's staging pays on
  a first save, or on every save when its staged copy is not cached), after emptying PyTorch's pinned-block cache;
* ``pinned_copy``: ``copy_(non_blocking=True)`` into those cached pinned buffers, then a synchronize (DCP
  ``async_save`` staging with a cached state dict, Megatron's ``--async-save``);
* ``dcp_stage_first`` / ``dcp_stage_cached``: PyTorch's own staging helpers
  (``torch.distributed._state_dict_utils._create_cpu_state_dict(pin_memory=True)`` then
  ``_copy_state_dict``), the first save's allocation and copy, and a later save's copy into the cached buffers;
* ``torch_save_gpu``: ``torch.save`` of the GPU state dict to a file (copy, serialise, write to the page cache),
  then ``fsync_after_save``, the flush of that file to the disk;
* ``torch_save_cpu``: ``torch.save`` of the pinned CPU copy (serialise and write, no device copy);
* ``dcp_save``: ``torch.distributed.checkpoint.save`` of the GPU state dict, one process with no process group
  (the plan, the metadata and one file: DCP's fixed cost at one rank).

Files are removed after each repeat. ``--budget-s`` stops before a size whose first repeat would not fit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import env_info, log_json  # noqa: E402

TENSOR_BYTES = 64 << 20


def state_dict(gb: float) -> dict:
    n = max(1, round(gb * 1e9 / TENSOR_BYTES))
    return {f"layer.{i}.w": torch.randn(TENSOR_BYTES // 4, device="cuda") for i in range(n)}


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def one_repeat(sd: dict, folder: Path) -> dict[str, float]:
    t = {}
    t["pageable_copy"], cpu = timed(lambda: {k: v.cpu() for k, v in sd.items()})
    del cpu
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()  # no cached pinned blocks: every allocation is a cudaHostAlloc
    seconds, pinned = timed(lambda: {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True) for k, v in sd.items()})
    t["pinned_alloc"] = seconds

    def copy_pinned():
        for k, v in sd.items():
            pinned[k].copy_(v, non_blocking=True)
    t["pinned_copy"], _ = timed(copy_pinned)
    try:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        def first():
            staged = _create_cpu_state_dict(sd, pin_memory=True, share_memory=False)
            return _copy_state_dict(sd, staged, non_blocking=True)
        seconds, staged = timed(first)
        t["dcp_stage_first"] = seconds
        t["dcp_stage_cached"], _ = timed(lambda: _copy_state_dict(sd, staged, non_blocking=True))
    except Exception as exc:  # noqa: BLE001 - private helpers: record and go on
        print("dcp staging:", type(exc).__name__, str(exc)[:200], flush=True)
    path = folder / "model.pt"
    t["torch_save_gpu"], _ = timed(lambda: torch.save(sd, path))
    t["fsync_after_save"], _ = timed(lambda: fsync_file(path))
    path.unlink()
    t["torch_save_cpu"], _ = timed(lambda: torch.save(pinned, path))
    path.unlink()
    try:
        import torch.distributed.checkpoint as dcp

        target = folder / "dcp"
        t["dcp_save"], _ = timed(lambda: dcp.save(sd, checkpoint_id=str(target)))
        shutil.rmtree(target, ignore_errors=True)
    except Exception as exc:  # noqa: BLE001
        print("dcp save:", type(exc).__name__, str(exc)[:200], flush=True)
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dir", default="/tmp/ckpt_bench")
    ap.add_argument("--gb", type=float, nargs="+", default=[0.25, 1.0, 4.0, 8.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=200.0)
    args = ap.parse_args()
    start = time.perf_counter()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    log_json(args.out, {"env": env_info(), "command": " ".join(sys.argv)})
    one_repeat(state_dict(min(args.gb)), folder)  # warm-up: CUDA context, pinned pool, file system, imports
    last, last_gb = None, 1.0
    for gb in args.gb:
        elapsed = time.perf_counter() - start
        if last is not None and elapsed + last * gb / last_gb * 1.2 > args.budget_s:
            print(f"stop before {gb} GB: {elapsed:.0f} s used", flush=True)
            break
        sd = state_dict(gb)
        nbytes = sum(v.numel() * v.element_size() for v in sd.values())
        t0 = time.perf_counter()
        reps = []
        for _ in range(args.repeats):
            reps.append(one_repeat(sd, folder))
            if time.perf_counter() - start > args.budget_s:
                break
        last, last_gb = (time.perf_counter() - t0) / len(reps), gb
        row = {"bytes": nbytes, "tensors": len(sd), "repeats": len(reps)}
        for key in reps[0]:
            vals = [r[key] for r in reps if key in r]
            med = statistics.median(vals)
            row[key] = {"median_s": med, "min_s": min(vals), "max_s": max(vals), "GBps": nbytes / med / 1e9}
        log_json(args.out, row)
        print(json.dumps({k: (v["median_s"] if isinstance(v, dict) else v) for k, v in row.items()}), flush=True)
        del sd
        torch.cuda.empty_cache()
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
