"""DCP async_save's blocked time by stager at Llama-3-70B's tensor count (issue 31). python3 THIS OUT.jsonl"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from state_dict_cost import Model, timed  # noqa: E402

SHAPES = ((80, 256, 512, 64, 1024), (20, 256, 512, 64, 1024), (80, 1024, 3584, 256, 8192))


def measure(shape: tuple, write) -> None:
    blocks, h, f, kv, vocab = shape
    model = Model(blocks, h, f, kv, vocab).cuda()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    base = {"layers": blocks, "hidden": h, "params": sum(1 for _ in model.parameters()),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "opt_state_tensors": sum(len(s) for s in opt.state.values())}
    folder = tempfile.mkdtemp(dir="/tmp")
    cached = FileSystemWriter(f"{folder}/cached", cache_staged_state_dict=True)

    parts = {"get_state_dict": lambda: get_state_dict(model, opt)}
    for name, fn in parts.items():
        med, lo, hi = timed(fn)
        write(part=name, median_s=med, min_s=lo, max_s=hi, **base)
    for name, writer in (("async_save_default", None), ("async_save_cached_pinned", cached)):
        xs = []
        for i in range(6):
            torch.cuda.synchronize()
            start = time.perf_counter()
            msd, osd = get_state_dict(model, opt)
            cid = f"{folder}/{name}{i}"
            fut = dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=cid, storage_writer=writer)
            torch.cuda.synchronize()
            xs.append(time.perf_counter() - start)
            fut.result()
        xs = sorted(xs[1:])
        write(part=name, median_s=xs[2], min_s=xs[0], max_s=xs[-1], **base)


def main(path: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    with open(path, "w") as out:
        def write(**row) -> None:
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(row, flush=True)

        write(part="torch_version", version=torch.__version__)
        for shape in SHAPES:
            try:
                measure(shape, write)
            except Exception as exc:  # keep the rows written
                print("FAILED", shape, repr(exc), flush=True)
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
