"""What a PyTorch DCP async save blocks on for a model of Llama-3-70B's tensor count, on one GPU (issue 31).

A model of 80 blocks of 9 parameter tensors (q, k, v, o, gate, up, down, two RMSNorms) plus the embedding, final
norm and head (723 parameters, Llama-3-70B's count) is sharded with FSDP2 (``fully_shard`` per block and at the
root, as torchtitan does) on a one-rank process group (``cpu:gloo,cuda:nccl``) and given AdamW state (3 tensors per
parameter: step, exp_avg, exp_avg_sq). Timed, host wall time between ``torch.cuda.synchronize()`` calls, medians
of 5 (3 for the save) after one untimed call:

- ``module_state_dict`` / ``optim_state_dict``: ``model.state_dict()``, ``optimizer.state_dict()``;
- ``get_model_state_dict`` / ``get_optimizer_state_dict`` / ``get_state_dict``: DCP's state-dict API
  (torch.distributed.checkpoint.state_dict), what torchtitan's checkpointer calls;
- ``async_save_blocking_incl_get_state_dict``: ``get_state_dict`` then ``dcp.async_save`` with DCP's default
  stager, until ``async_save`` returns (the blocked part of a save; the write finishes in the background).

Three sizes: hidden 256 and 1024 at 80 blocks (the tensor count fixed, the bytes 25x apart) and hidden 256 at 20
blocks (the bytes and the count both 4x smaller).

    python3 benchmarks/device/state_dict_cost.py OUT.jsonl
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
)
from torch.distributed.fsdp import fully_shard

#: (blocks, hidden, FFN, K/V width, vocabulary) of each model timed
SHAPES = ((80, 256, 512, 64, 1024), (80, 1024, 3584, 256, 8192), (20, 256, 512, 64, 1024))


class Block(nn.Module):
    def __init__(self, h: int, f: int, kv: int):
        super().__init__()
        self.q, self.o = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
        self.k, self.v = nn.Linear(h, kv, bias=False), nn.Linear(h, kv, bias=False)
        self.gate, self.up = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.down = nn.Linear(f, h, bias=False)
        self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)


class Model(nn.Module):
    def __init__(self, blocks: int, h: int, f: int, kv: int, vocab: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(Block(h, f, kv) for _ in range(blocks))
        self.norm = nn.RMSNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.emb(x)))


def timed(fn, repeats: int = 5) -> tuple[float, float, float]:
    """Median, min and max host seconds of ``fn`` after one untimed call."""
    fn()
    xs = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        xs.append(time.perf_counter() - start)
    return statistics.median(xs), min(xs), max(xs)


def measure(shape: tuple, write) -> None:
    blocks, h, f, kv, vocab = shape
    model = Model(blocks, h, f, kv, vocab).cuda()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randint(0, vocab, (2, 16), device="cuda")).float().sum().backward()
    for p in model.parameters():  # the blocks are not in the forward: give them gradients so Adam holds state
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    opt.step()
    base = {"layers": blocks, "hidden": h, "params": sum(1 for _ in model.parameters()),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "opt_state_tensors": sum(len(s) for s in opt.state.values())}
    parts = {"module_state_dict": model.state_dict, "optim_state_dict": opt.state_dict,
             "get_model_state_dict": lambda: get_model_state_dict(model),
             "get_optimizer_state_dict": lambda: get_optimizer_state_dict(model, opt),
             "get_state_dict": lambda: get_state_dict(model, opt)}
    for name, fn in parts.items():
        med, lo, hi = timed(fn)
        write(part=name, median_s=med, min_s=lo, max_s=hi, **base)
    folder, futures = tempfile.mkdtemp(dir="/tmp"), []

    def save() -> None:
        msd, osd = get_state_dict(model, opt)
        futures.append(dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=f"{folder}/c{len(futures)}"))

    med, lo, hi = timed(save, 3)
    write(part="async_save_blocking_incl_get_state_dict", median_s=med, min_s=lo, max_s=hi, **base)
    for fut in futures:
        fut.result()


def main(path: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    with open(path, "w") as out:
        def write(**row) -> None:
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(row, flush=True)

        for shape in SHAPES:
            measure(shape, write)
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
