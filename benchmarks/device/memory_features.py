"""The memory features of issue 28 item 3 realised in plain PyTorch on one H200: peak allocated bytes per case.

No published peak exists for these flags on a model we may use, so each is measured on a faithful plain-PyTorch
realisation of what the framework does (docs/memory_features.md names each framework's code):

* ``amp`` layout (``framework: pytorch``, ``precision: amp_bf16``): fp32 parameters, bf16 autocast, AdamW.
  ``--moments bf16`` keeps exp_avg and exp_avg_sq in bf16 (``training.exp_avg_dtype`` / ``exp_avg_sq_dtype``); the
  update runs in fp32 on slices of ``CHUNK`` elements, as a fused multi-tensor kernel does in registers.
* ``mcore`` layout (``framework: megatron``, ``precision: bf16``), Megatron-Core's DDP and distributed optimizer
  on one rank: bf16 parameters; one contiguous fp32 gradient buffer, each parameter's ``main_grad`` a view of it,
  filled by a post-accumulate-grad hook that adds ``param.grad`` and frees it (megatron/core/distributed/
  distributed_data_parallel.py ``_make_backward_post_hook``); an fp32 master copy, or with ``--remainders`` the
  16 low bits of it as int16 beside the bf16 weights (``store_param_remainders``, core/optimizer/
  distrib_optimizer.py); Adam moments in ``--moments``; the buffer is zeroed, not freed, after the step.
  Cross entropy as Megatron's unfused vocab-parallel one on ``logits.float()`` (``MegatronCrossEntropy``,
  ``training.cross_entropy: unfused``).
* ``--fp8-store``: the SwiGLU saves its input as float8_e4m3fn for backward and casts it back there (Megatron
  fused_bias_swiglu.py ``SwiGLUFunction``, ``activation_func_fp8_input_store``); without it, the same function
  saves the bf16 input.
* ``--offload N``: the first N blocks' saved tensors go to pinned host memory when saved and come back when
  backward needs them (``torch.autograd.graph.saved_tensors_hooks``), the residency Transformer Engine's CPU offload
  ends with (``cpu_offloading_num_layers``: only layers N..L-1 keep activations on the GPU at the loss).
* ``fsdp2`` (``framework: torchtitan``, ``zero: 3``): torchtitan's training loop on one rank (``fsdp2_step``).
* ``--pp 2``: the blocks split into two stages run on this one GPU in Megatron's 1F1B order for ``--microbatches``;
  a stage-0 output is handed to stage 1 as a copy (the receive buffer), and with ``--dealloc`` its storage is
  replaced by one element once sent (schedules.py ``deallocate_output_tensor``) and its backward runs through the
  autograd engine directly (``custom_backward``).

Prints one JSON line per case: ``peak_allocated_bytes`` (torch.cuda.max_memory_allocated over ``--steps`` steps
after ``--warmups``), the bytes allocated after building, after the first step, and the configuration.

    python3 benchmarks/device/memory_features.py --out OUT --case amp --moments bf16 ...
    /work/venv-torch/bin/python benchmarks/device/memory_features.py --device cpu --tiny   # dry run of every case
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcore_layout import AmpLowMomentAdam, McoreOptimizer, megatron_loss  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class SwiGLU(torch.autograd.Function):
    """silu(gate) * up over the fc1 output [gate | up], saving that input in bf16 or float8_e4m3fn."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, fp8: bool) -> torch.Tensor:
        ctx.dtype = x.dtype
        ctx.save_for_backward(x.to(torch.float8_e4m3fn) if fp8 else x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (x,) = ctx.saved_tensors
        gate, up = x.to(ctx.dtype).chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        dgate = dy * up * sig * (1 + gate * (1 - sig))
        return torch.cat([dgate, dy * gate * sig], dim=-1), None


class Block(nn.Module):
    """Pre-norm block: LayerNorm, qkv, causal SDPA, proj; LayerNorm, fc1, GeLU or SwiGLU, fc2 (no biases)."""

    def __init__(self, a: argparse.Namespace) -> None:
        super().__init__()
        self.heads, self.act, self.fp8 = a.heads, a.activation, a.fp8_store
        h, f = a.hidden, a.ffn
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
        self.fc1 = nn.Linear(h, 2 * f if a.activation == "swiglu" else f, bias=False)
        self.fc2 = nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h))
        y = self.fc1(self.norm2(x))
        y = SwiGLU.apply(y, self.fp8) if self.act == "swiglu" else F.gelu(y)
        return x + self.fc2(y)


class Stage(nn.Module):
    """Blocks [first, last) of the model; stage 0 embeds, the last stage norms and projects to the vocabulary."""

    def __init__(self, a: argparse.Namespace, first: int, last: int) -> None:
        super().__init__()
        self.first, self.is_last = first, last == a.layers
        self.embed = nn.Embedding(a.vocab, a.hidden) if first == 0 else None
        self.pos = nn.Embedding(a.seq, a.hidden) if first == 0 else None
        self.blocks = nn.ModuleList(Block(a) for _ in range(first, last))
        self.norm = nn.LayerNorm(a.hidden) if self.is_last else None
        self.head = nn.Linear(a.hidden, a.vocab, bias=False) if self.is_last else None
        self.offload = a.offload

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for i, block in enumerate(self.blocks):
            if self.first + i < self.offload:
                with torch.autograd.graph.saved_tensors_hooks(_to_host, _to_device):
                    x = block(x)
            else:
                x = block(x)
        return self.head(self.norm(x)) if self.is_last else x


def _to_host(t: torch.Tensor):
    if t.device.type == "cpu" or t.numel() < 2:
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=torch.cuda.is_available())
    host.copy_(t)
    return (t.device, host)


def _to_device(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    device, host = packed
    return host.to(device, non_blocking=True)


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Unfused cross entropy on an fp32 copy of the logits (Megatron's vocab_parallel_cross_entropy(logits.float()),
    and the plain-PyTorch loops of train_step_gpt.py)."""
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tokens.view(-1))


def amp_step(a, model, tokens):
    params = list(model.parameters())
    opt = (torch.optim.AdamW(params, lr=1e-5, fused=tokens.is_cuda) if a.moments == "fp32"
           else AmpLowMomentAdam(params, DTYPES[a.moments]))

    def step() -> None:
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
            logits = model(tokens)
        loss = lm_loss(logits, tokens)  # the loop keeps ``logits`` through backward, as train_step_gpt.py does
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def fsdp2_step(a, model, tokens):
    """torchtitan's loop on one rank: fully_shard per block and at the root with MixedPrecisionPolicy(param_dtype
    bf16, reduce_dtype fp32) (torchtitan parallelize.py apply_fsdp, its defaults), fused AdamW over the fp32 shards,
    ``del pred`` before backward and clip_grad_norm_(foreach=True) (pytorch/torchtitan torchtitan/train.py at
    000204a4, forward_backward_step and train_step), zero_grad(set_to_none=True)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    if not dist.is_initialized():
        dist.init_process_group("nccl" if tokens.is_cuda else "gloo", init_method="tcp://127.0.0.1:29517",
                                rank=0, world_size=1)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=tokens.is_cuda)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        pred = model(tokens)
        loss = lm_loss(pred, tokens)
        del pred
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)   # training.max_norm 1.0
        opt.step()
    return step


def mcore_step(a, stages, batches):
    opt = McoreOptimizer([p for s in stages for p in s.parameters()], DTYPES[a.moments], a.remainders)
    if len(stages) == 1:
        def step() -> None:
            for tokens in batches:  # gradient accumulation into the fp32 buffer
                (megatron_loss(stages[0](tokens), tokens) / len(batches)).backward()
            opt.step()
        return step

    def step() -> None:
        for kind, i in one_f_one_b(len(batches)):
            kind(a, stages, batches, i, state)
        opt.step()
    state: dict = {}
    return step


def one_f_one_b(m: int) -> list:
    """Megatron's 1F1B order of a two-stage pipeline as one serial list: stage 0 warms up one forward."""
    order = [(fwd0, 0)]
    for i in range(m):
        order += ([(fwd0, i + 1)] if i + 1 < m else []) + [(fwd1, i), (bwd1, i), (bwd0, i)]
    return order


def fwd0(a, stages, batches, i, state) -> None:
    out = stages[0](batches[i])
    recv = out.detach().clone().requires_grad_()  # the next stage's receive buffer
    if a.dealloc:  # schedules.py deallocate_output_tensor: keep the autograd node, free the storage
        out.data = torch.empty((1,), device=out.device, dtype=out.dtype)
    state[("out", i)], state[("recv", i)] = out, recv


def fwd1(a, stages, batches, i, state) -> None:
    state[("loss", i)] = megatron_loss(stages[1](state[("recv", i)]), batches[i]) / len(batches)


def bwd1(a, stages, batches, i, state) -> None:
    state.pop(("loss", i)).backward()
    state[("grad", i)] = state.pop(("recv", i)).grad


def bwd0(a, stages, batches, i, state) -> None:
    out, grad = state.pop(("out", i)), state.pop(("grad", i))
    torch.autograd.variable.Variable._execution_engine.run_backward(  # schedules.py custom_backward
        tensors=(out,), grad_tensors=(grad,), keep_graph=False, create_graph=False, inputs=(),
        allow_unreachable=True, accumulate_grad=True)


def measure(a) -> dict:
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    bounds = [0, a.layers] if a.pp == 1 else [0, a.layers // 2, a.layers]
    with torch.device(device):
        stages = [Stage(a, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    if a.case == "mcore":
        for s in stages:
            s.to(torch.bfloat16)
    batches = [torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=device) for _ in range(a.microbatches)]
    after_build = torch.cuda.memory_allocated(device) if cuda else 0
    step = (amp_step(a, stages[0], batches[0]) if a.case == "amp" else
            fsdp2_step(a, stages[0], batches[0]) if a.case == "fsdp2" else mcore_step(a, stages, batches))
    for _ in range(a.warmups):
        step()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    after_warmup = torch.cuda.memory_allocated(device) if cuda else 0
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    params = sum(p.numel() for s in stages for p in s.parameters())
    return {"params": params, "allocated_after_build_bytes": after_build,
            "allocated_after_warmup_bytes": after_warmup,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
            "step_s_median": statistics.median(times), "step_s_samples": times,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device) if cuda else "cpu"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", choices=("amp", "mcore", "fsdp2"), default="amp")
    for name, default in (("layers", 12), ("hidden", 2048), ("heads", 16), ("ffn", 8192), ("vocab", 32000),
                          ("seq", 2048), ("micro-batch", 4), ("microbatches", 1), ("pp", 1), ("offload", 0),
                          ("warmups", 2), ("steps", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--activation", choices=("gelu", "swiglu"), default="gelu")
    p.add_argument("--moments", choices=tuple(DTYPES), default="fp32")
    p.add_argument("--remainders", action="store_true")
    p.add_argument("--fp8-store", action="store_true")
    p.add_argument("--dealloc", action="store_true")
    p.add_argument("--campaign", action="store_true", help="run every case of CAMPAIGN, one JSON line each")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="small dims for a CPU dry run")
    p.add_argument("--out", default=None, help="folder for memory_features.jsonl")
    return p


ACT = dict(layers=12, hidden=2048, heads=16, ffn=8192, micro_batch=4, seq=2048)
"""Activation-heavy shape (the 1-GPU L12 h2048 b4 s2048 run of h200x2_train, without biases)."""
PARAM = dict(layers=8, hidden=4096, heads=32, ffn=16384, micro_batch=1, seq=512)
"""State-heavy shape: 1.9 B parameters, activations a few per cent of the peak."""
CAMPAIGN = (
    dict(ACT, case="amp"), dict(ACT, case="amp", moments="bf16"),
    dict(PARAM, case="amp"), dict(PARAM, case="amp", moments="bf16"),
    dict(PARAM, case="mcore"), dict(PARAM, case="mcore", moments="bf16"),
    dict(PARAM, case="mcore", moments="bf16", remainders=True),
    dict(ACT, case="mcore"), dict(ACT, case="mcore", offload=4), dict(ACT, case="mcore", offload=8),
    dict(ACT, case="mcore", activation="swiglu", ffn=5632),
    dict(ACT, case="mcore", activation="swiglu", ffn=5632, fp8_store=True),
    dict(ACT, case="mcore", layers=4, pp=2, microbatches=4),
    dict(ACT, case="mcore", layers=4, pp=2, microbatches=4, dealloc=True),
    dict(ACT, case="amp", warmups=3, steps=8), dict(ACT, case="fsdp2", warmups=3, steps=8),
)
TINY = dict(hidden=64, heads=4, ffn=128, vocab=512, seq=32, micro_batch=2)


def main() -> None:
    args = parser().parse_args()
    cases = CAMPAIGN if args.campaign else ({},)
    if args.device.startswith("cuda"):      # clocks up before the timed cases (hf_common.warm_clocks)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from hf_common import warm_clocks
        warm_clocks(torch.device(args.device), 5.0)
    for overrides in cases:
        a = argparse.Namespace(**{**vars(args), **overrides})
        if a.tiny:
            a = argparse.Namespace(**{**vars(a), **TINY, "layers": min(a.layers, 4)})
        row = {"config": {k: v for k, v in vars(a).items() if k not in ("campaign", "out", "device", "tiny")},
               **measure(a)}
        print(json.dumps(row), flush=True)
        if a.out:
            with open(f"{a.out}/memory_features.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
