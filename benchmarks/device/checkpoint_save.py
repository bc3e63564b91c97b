"""One rank's checkpoint save on the H200 host: D2H staging and torch.save / DCP save; method in
simulator/validation/data/h200_checkpoint/README.md.  python3 benchmarks/device/checkpoint_save.py OUT.jsonl DIR"""
import json
import os
import shutil
import statistics as st
import sys
import time

import torch
from torch.distributed import checkpoint as dcp
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

P = time.perf_counter
MB64 = 64 << 20


def timed(fn):
    torch.cuda.synchronize()
    t0 = P()
    out = fn()
    torch.cuda.synchronize()
    return P() - t0, out


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def repeat(sd, d):
    t = {}
    t["pageable_copy"], _ = timed(lambda: {k: v.cpu() for k, v in sd.items()})
    torch._C._host_emptyCache()  # no cached pinned blocks: each allocation is a cudaHostAlloc
    t["pinned_alloc"], pin = timed(lambda: {k: torch.empty(v.shape, pin_memory=True) for k, v in sd.items()})
    t["pinned_copy"], _ = timed(lambda: [pin[k].copy_(v, non_blocking=True) for k, v in sd.items()])
    t["dcp_stage_first"], st_sd = timed(
        lambda: _copy_state_dict(sd, _create_cpu_state_dict(sd, pin_memory=True), non_blocking=True))
    t["dcp_stage_cached"], _ = timed(lambda: _copy_state_dict(sd, st_sd, non_blocking=True))
    f = os.path.join(d, "m.pt")
    t["torch_save_gpu"], _ = timed(lambda: torch.save(sd, f))
    t["fsync_after_save"], _ = timed(lambda: fsync(f))
    t["torch_save_cpu"], _ = timed(lambda: torch.save(pin, f))
    os.remove(f)
    t["dcp_save"], _ = timed(lambda: dcp.save(sd, checkpoint_id=os.path.join(d, "dcp")))
    shutil.rmtree(os.path.join(d, "dcp"))
    return t


def main(out, d, sizes=(0.1, 0.5, 2.0, 6.0), repeats=3):
    os.makedirs(d, exist_ok=True)
    with open(out, "a") as fh:
        fh.write(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "argv": sys.argv}) + "\n")
    for i, gb in enumerate((min(sizes), *sizes)):
        sd = {f"l{j}": torch.randn(MB64 // 4, device="cuda") for j in range(round(gb * 1e9 / MB64))}
        if i == 0:  # warm-up (CUDA context, imports, file system), not recorded
            repeat(sd, d)
            continue
        reps = [repeat(sd, d) for _ in range(repeats)]
        n = len(sd) * MB64
        row = {"bytes": n, "tensors": len(sd), "repeats": len(reps)}
        for k in reps[0]:
            v = [r[k] for r in reps]
            row[k] = {"median_s": st.median(v), "min_s": min(v), "max_s": max(v), "GBps": n / st.median(v) / 1e9}
        with open(out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps({k: v["median_s"] if isinstance(v, dict) else v for k, v in row.items()}), flush=True)
        del sd
    shutil.rmtree(d)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
