"""Megatron's interleaved 1F1B schedule on two pipeline ranks that share one GPU: each rank's peak allocated bytes.

Two processes on the same GPU (each with its own caching allocator, so ``torch.cuda.max_memory_allocated`` is the
rank's own peak), talking through gloo with host copies of the stage outputs and their gradients. Each rank holds
``vpp`` model chunks of ``layers / (pp vpp)`` blocks of memory_features.py's GPT in Megatron's layout
(mcore_layout.py: bf16 weights, fp32 gradient buffer, master copy, Adam moments; unfused vocab-parallel cross
entropy on the last chunk of the last rank). The order of chunk forwards and backwards is Megatron-Core's
(megatron/core/pipeline_parallel/schedules.py ``forward_backward_pipelining_with_interleaving``, microbatch group
size pp): warm-up (pp - rank - 1) 2 + (vpp - 1) pp chunk forwards, then one forward and one backward, then the
remaining backwards; virtual microbatch k runs chunk (k mod pp vpp) div pp (backward: vpp - 1 minus it) of
microbatch (k div pp vpp) pp + k mod pp. A stage output is sent, then its storage freed (deallocate_output_tensor).

    python3 interleaved_peak.py --out OUT          # one JSON line per rank in OUT/interleaved_peak.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcore_layout import McoreOptimizer, megatron_loss  # noqa: E402
from memory_features import Block  # noqa: E402


class Chunk(torch.nn.Module):
    def __init__(self, a, blocks: int, first: bool, last: bool) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.hidden) if first else None
        self.pos = torch.nn.Embedding(a.seq, a.hidden) if first else None
        self.blocks = torch.nn.ModuleList(Block(a) for _ in range(blocks))
        self.norm = torch.nn.LayerNorm(a.hidden) if last else None
        self.head = torch.nn.Linear(a.hidden, a.vocab, bias=False) if last else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)) if self.head is not None else x


def order(pp: int, vpp: int, m: int, rank: int) -> list[tuple[str, int]]:
    total = m * vpp
    warm = min((pp - rank - 1) * 2 + (vpp - 1) * pp, total)
    ops = [("F", k) for k in range(warm)]
    for k in range(total - warm):
        ops += [("F", k + warm), ("B", k)]
    return ops + [("B", k) for k in range(total - warm, total)]


def chunk_mb(k: int, pp: int, vpp: int, backward: bool) -> tuple[int, int]:
    c = (k % (pp * vpp)) // pp
    return (vpp - 1 - c if backward else c), (k // (pp * vpp)) * pp + k % pp


class Rank:
    """One pipeline rank: its chunks, optimizer state and the sends in flight."""

    def __init__(self, rank: int, a) -> None:
        self.rank, self.a, self.device = rank, a, torch.device(a.device)
        torch.manual_seed(rank)
        per = a.layers // (a.pp * a.vpp)
        self.last_rank = rank == a.pp - 1
        with torch.device(self.device):
            self.chunks = [Chunk(a, per, rank == 0 and c == 0, self.last_rank and c == a.vpp - 1)
                           .to(torch.bfloat16) for c in range(a.vpp)]
        self.opt = McoreOptimizer([p for ch in self.chunks for p in ch.parameters()], torch.float32, False)
        self.tokens = [torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=self.device)
                       for _ in range(a.microbatches)]
        self.nxt, self.prv = (rank + 1) % a.pp, (rank - 1) % a.pp
        self.sends, self.state = [], {}

    @staticmethod
    def tag(kind: int, c: int, mb: int) -> int:
        return (kind * 64 + c) * 1024 + mb

    def send(self, t, dst: int, tg: int) -> None:
        host = t.detach().to("cpu", torch.float32)
        self.sends.append((dist.isend(host, dst, tag=tg), host))

    def recv(self, src: int, tg: int):
        host = torch.empty((self.a.micro_batch, self.a.seq, self.a.hidden), dtype=torch.float32)
        dist.recv(host, src, tag=tg)
        return host.to(self.device, torch.bfloat16)

    def forward(self, c: int, mb: int, first: bool, last: bool) -> None:
        x = self.tokens[mb] if first else self.recv(self.prv, self.tag(0, c if self.rank else c - 1, mb))
        x = x if first else x.requires_grad_()
        out = self.chunks[c](x)
        if last:
            out = megatron_loss(out, self.tokens[mb]) / self.a.microbatches
        else:
            self.send(out, self.nxt, self.tag(0, c, mb))
            out.data = torch.empty((1,), device=self.device, dtype=out.dtype)   # deallocate_output_tensor
        self.state[c, mb] = (x, out)

    def backward(self, c: int, mb: int, first: bool, last: bool) -> None:
        x, out = self.state.pop((c, mb))
        grad = torch.ones_like(out) if last else self.recv(self.nxt, self.tag(1, c + self.last_rank, mb))
        torch.autograd.variable.Variable._execution_engine.run_backward(   # schedules.py custom_backward
            tensors=(out,), grad_tensors=(grad,), keep_graph=False, create_graph=False, inputs=(),
            allow_unreachable=True, accumulate_grad=True)
        if not first:
            self.send(x.grad, self.prv, self.tag(1, c, mb))

    def step(self) -> None:
        a = self.a
        for kind, k in order(a.pp, a.vpp, a.microbatches, self.rank):
            c, mb = chunk_mb(k, a.pp, a.vpp, kind == "B")
            first, last = self.rank == 0 and c == 0, self.last_rank and c == a.vpp - 1
            (self.forward if kind == "F" else self.backward)(c, mb, first, last)
        for req, _ in self.sends:
            req.wait()
        self.sends.clear()
        self.opt.step()


def worker(rank: int, a) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
    dist.init_process_group("gloo", rank=rank, world_size=a.pp)
    r = Rank(rank, a)
    cuda = r.device.type == "cuda"
    for _ in range(a.warmups):
        r.step()
    if cuda:
        torch.cuda.synchronize(r.device)
        torch.cuda.reset_peak_memory_stats(r.device)
    for _ in range(a.steps):
        r.step()
    row = {"rank": rank, "config": {k: v for k, v in vars(a).items() if k not in ("out", "device")},
           "params": sum(p.numel() for ch in r.chunks for p in ch.parameters()),
           "peak_allocated_bytes": torch.cuda.max_memory_allocated(r.device) if cuda else 0,
           "allocated_end_bytes": torch.cuda.memory_allocated(r.device) if cuda else 0, "torch": torch.__version__}
    print(json.dumps(row), flush=True)
    if a.out:
        with open(f"{a.out}/interleaved_peak.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("layers", 8), ("hidden", 2048), ("heads", 16), ("ffn", 8192), ("vocab", 32000),
                          ("seq", 2048), ("micro-batch", 2), ("microbatches", 4), ("pp", 2), ("vpp", 2),
                          ("warmups", 2), ("steps", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    a.activation, a.fp8_store = "gelu", False
    if a.tiny:
        a.hidden, a.heads, a.ffn, a.vocab, a.seq = 64, 4, 128, 512, 32
    mp.spawn(worker, args=(a,), nprocs=a.pp, join=True)


if __name__ == "__main__":
    main()
