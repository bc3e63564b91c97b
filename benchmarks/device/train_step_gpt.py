"""Measure one training step of a plain-PyTorch GPT on real GPUs: peak memory and step time.

Runs under torchrun (one process per GPU, DDP) or as one process. The model is written with plain PyTorch modules
only (nn.Linear, nn.LayerNorm, GeLU, F.scaled_dot_product_attention with a causal mask, no dropout), trained with
AMP (fp32 parameters, bf16 autocast) and AdamW: exactly what ``framework: pytorch`` with ``precision: amp_bf16``
accounts for. Prints one JSON line per rank-0 configuration with the peak allocated bytes (after a warm-up step,
torch.cuda.max_memory_allocated over a step) and the median step time.

    torchrun --nproc-per-node 2 benchmarks/device/train_step_gpt.py --layers 12 --hidden 2048 ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_step(model: nn.Module, optimizer, tokens: torch.Tensor, vocab: int):
    """One AMP training step: bf16 autocast forward, fp32 cross entropy, backward, AdamW, gradients set to None."""
    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
        loss = F.cross_entropy(logits.float().view(-1, vocab), tokens.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("layers", 12), ("hidden", 2048), ("heads", 16), ("ffn", 8192), ("vocab", 32000),
                          ("seq", 2048), ("micro-batch", 4), ("steps", 10)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    distributed = "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl", device_id=device)
    model = GPT(args.layers, args.hidden, args.heads, args.ffn, args.vocab, args.seq).to(device)
    params = sum(p.numel() for p in model.parameters())
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device=device)

    step = make_step(model, optimizer, tokens, args.vocab)
    for _ in range(3):  # warm-up: optimizer states exist from the first step on; clocks ramp up
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    if rank == 0:
        print(json.dumps({"params": params, "world": dist.get_world_size() if distributed else 1,
                          "config": vars(args), "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
                          "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
                          "step_s_median": statistics.median(times), "step_s_all": times,
                          "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device)}), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
