"""Megatron-Core's optimizer-side memory layout and loss on one rank, in plain PyTorch, for memory_features.py.

* ``McoreOptimizer``: the contiguous fp32 gradient buffer (``param.main_grad`` views, filled by a
  post-accumulate-grad hook that adds ``param.grad`` and frees it: megatron/core/distributed/
  distributed_data_parallel.py ``_make_backward_post_hook``), the fp32 master copy or its 16 low bits as int16
  (``store_param_remainders``, core/optimizer/distrib_optimizer.py), Adam moments in a chosen dtype; the update in
  fp32 slices of ``CHUNK`` elements, as a fused multi-tensor kernel does in registers.
* ``AmpLowMomentAdam``: AdamW over fp32 parameters with low-precision moments (``exp_avg_dtype``).
* ``megatron_loss``: Megatron's unfused vocab-parallel cross entropy at tp 1.
"""

from __future__ import annotations

import torch
from torch import nn

CHUNK = 1 << 24
"""Elements per slice of the optimizer update (64 MiB of fp32 per temporary)."""


class McoreOptimizer:
    """Megatron-Core's gradient buffer, master copy (or remainders) and Adam moments on one rank."""

    def __init__(self, params: list[nn.Parameter], moments: torch.dtype, remainders: bool) -> None:
        self.params = params
        self.buffer = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32, device=params[0].device)
        offset = 0
        for p in params:
            p.main_grad = self.buffer[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
            p.register_post_accumulate_grad_hook(_accumulate_main_grad)
        if remainders:
            self.master = [torch.zeros(p.numel(), dtype=torch.int16, device=p.device) for p in params]
        else:
            self.master = [p.detach().float().flatten() for p in params]
        self.remainders = remainders
        self.m = [torch.zeros(p.numel(), dtype=moments, device=p.device) for p in params]
        self.v = [torch.zeros(p.numel(), dtype=moments, device=p.device) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        for p, master, m, v in zip(self.params, self.master, self.m, self.v, strict=True):
            flat, grad = p.view(-1), p.main_grad.view(-1)
            for lo in range(0, flat.numel(), CHUNK):
                hi = min(lo + CHUNK, flat.numel())
                if self.remainders:  # fp32 bits = bf16 bits << 16 | remainder
                    bits = (flat[lo:hi].view(torch.int16).int() << 16) | (master[lo:hi].int() & 0xFFFF)
                    w = bits.view(torch.float32)
                else:
                    w = master[lo:hi]
                w32, m32, v32 = _adam(w.clone(), grad[lo:hi], m[lo:hi].float(), v[lo:hi].float())
                m[lo:hi].copy_(m32)
                v[lo:hi].copy_(v32)
                if self.remainders:
                    bits = w32.view(torch.int32)
                    flat[lo:hi].view(torch.int16).copy_((bits >> 16).to(torch.int16))
                    master[lo:hi].copy_((bits & 0xFFFF).to(torch.int16))
                else:
                    master[lo:hi].copy_(w32)
                    flat[lo:hi].copy_(w32)
        self.buffer.zero_()


def _accumulate_main_grad(p: nn.Parameter) -> None:
    p.main_grad.add_(p.grad)
    p.grad = None


def _adam(w, g, m, v, lr=1e-5, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
    """One AdamW update in fp32 (bias correction left out: it changes no byte)."""
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    w.mul_(1 - lr * wd).addcdiv_(m, v.sqrt().add_(eps), value=-lr)
    return w, m, v


class AmpLowMomentAdam:
    """AdamW over fp32 parameters with bf16 moments, updated in fp32 slices."""

    def __init__(self, params: list[nn.Parameter], moments: torch.dtype) -> None:
        self.params = params
        self.m = [torch.zeros(p.numel(), dtype=moments, device=p.device) for p in params]
        self.v = [torch.zeros(p.numel(), dtype=moments, device=p.device) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            flat, grad = p.view(-1), p.grad.view(-1)
            for lo in range(0, flat.numel(), CHUNK):
                hi = min(lo + CHUNK, flat.numel())
                _, m32, v32 = _adam(flat[lo:hi], grad[lo:hi], m[lo:hi].float(), v[lo:hi].float())
                m[lo:hi].copy_(m32)
                v[lo:hi].copy_(v32)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


class MegatronCrossEntropy(torch.autograd.Function):
    """Megatron's unfused vocab-parallel cross entropy at tp 1 (megatron/core/tensor_parallel/cross_entropy.py at
    core_v0.6.0): the max subtracted out of place, exp in place, the softmax saved; backward rewrites the saved
    softmax in place into the gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = logits - logits.max(dim=-1)[0].unsqueeze(-1)
        predicted = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        exp_logits = logits.exp_()
        sum_exp = exp_logits.sum(dim=-1)
        exp_logits.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(exp_logits, target)
        return torch.log(sum_exp) - predicted

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        softmax, target = ctx.saved_tensors
        rows = torch.arange(softmax.shape[0], device=softmax.device)
        softmax[rows, target] -= 1.0
        return softmax.mul_(grad_output.unsqueeze(-1)), None


def megatron_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``vocab_parallel_cross_entropy(logits.float(), labels)`` averaged over the tokens."""
    return MegatronCrossEntropy.apply(logits.float().view(-1, logits.shape[-1]), tokens.view(-1)).mean()
