"""The local token permutation of a MoE layer and the vocabulary cross entropy, forward + backward, as three
generations of Megatron-LM write them in plain PyTorch, timed on one GPU against a streaming copy.

Question it settles (issue 11): the step-time model prices the permute / unpermute pair as one fused kernel pair
(TE's moe_permute / moe_unpermute: each routed row read once and written once) and the cross entropy as one fused
pass over the logits. Runs on Megatron stacks that predate those fusions (FlagPerf's core_v0.6 and Megatron-LM
240405 cases) run them as chains of PyTorch ops. How long do those chains take, in bytes of a streaming copy?

Paths (T tokens, k experts per token, R = T*k routed rows, hidden h, bf16):

* ``gather_scatter``: core_v0.6 MoEAllGatherTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py at
  tag core_v0.6.0): permute = torch.gather of the token rows by a row-expanded int64 index (global -> local
  rows) and a second torch.gather into expert order; unpermute = zeros_like + scatter back, multiply by the
  routing scores, zeros [T, h] + scatter_add over the k copies. Backward is autograd's (gather -> scatter_add
  into zeros, scatter -> gather, mul -> mul + row sums).
* ``index_select``: core_v0.7 onwards without ``--moe-permute-fusion`` (moe_utils.permute / unpermute):
  permute = index_select of the token rows; unpermute = multiply by the permuted probs, zeros [T, h] +
  scatter_add_ with the row-expanded index (non-deterministic mode).
* ``index_copy``: core_v0.7-v0.9 moe_utils.permute / unpermute: permute = index_select of the token rows;
  unpermute = zeros [R, h] + index_copy_ back to token-major order, multiply by the probs [T, k] and sum over k
  (deterministic, no atomics forward; the index_select's backward is an index_add).
* ``sequential_experts``: core_v0.6 SequentialMLP's output assembly around the expert loop (zeros_like of the
  permuted rows + one slice assignment per expert), added on top of a path when experts run one by one.
* ``copy``: x.clone() of an [R, h] tensor: the streaming reference (2 bytes read + 2 written per element).

Cross entropy (``ce_unfused``; ``torch_s`` / ``torch_fwd_s`` on the same row: plain PyTorch's
``F.cross_entropy(logits.float(), target)`` as torchtitan calls it): core_v0.6's _VocabParallelCrossEntropy on logits.float() (tensor_parallel/
cross_entropy.py: max, subtract, exp in place, sum, divide in place, save the softmax; backward: subtract one at
the target, multiply in place, cast the gradient back to bf16), for [T, V] bf16 logits.

Each path's forward + backward is captured in a CUDA graph (inputs and the routing fixed, as the data-dependent
index work -- argsort, histc, masked_select, nonzero -- runs before it) and timed as a median of replays.
``copy_equiv`` = time x (bytes/s of the copy measured in the same run): the bytes a streaming kernel would move
in the same time. The simulator reads the fitted copy-equivalent bytes per routed row and per token.

    python3 benchmarks/device/moe_dispatch_paths.py --out moe_dispatch_paths.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import bench, env_info, gpu_clocks, log_json, record_failure, warm_clocks  # noqa: E402

# (T, k, h): the FlagPerf Mixtral 8x7B layer (12288 tokens after the TP all-gather, top-2, h 4096), the FlagPerf
# Qwen1.5-style layer (8192, top-2, h 2048), and top-8 / wider shapes to separate the per-row and per-token terms
SHAPES = ((12288, 2, 4096), (8192, 2, 2048), (16384, 2, 4096), (4096, 8, 4096), (8192, 8, 2048), (4096, 8, 7168),
          (16384, 1, 4096))
CE_SHAPES = ((8192, 151936), (8192, 128256), (12288, 4000), (4096, 50304))


def routing(T: int, k: int, E: int = 8):
    """Top-k expert ids per token (uniform random), and the index tensors both dispatchers derive from them."""
    ids = torch.stack([torch.randperm(E, device="cuda")[:k] for _ in range(1)]).expand(T, k).clone()
    ids = (ids + torch.randint(0, E, (T, 1), device="cuda")) % E          # k distinct experts per token
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)                               # local rows -> expert order
    token_of_row = torch.arange(T, device="cuda").repeat_interleave(k)      # global_local_map: the token of each row
    return flat, order, token_of_row


def gather_scatter_path(x, y, scores, token_of_row, order, T, h):
    """core_v0.6 all-gather dispatcher (sequence-parallel / EP branch): permute and unpermute, forward."""
    gmap = token_of_row.view(-1, 1).expand(-1, h)
    local = torch.gather(x, 0, gmap)
    idx = order.view(-1, 1).expand(-1, h)
    permuted = torch.gather(local, 0, idx)
    unperm = torch.zeros_like(y).scatter(0, idx, y)
    unperm = unperm * scores.view(-1, 1)
    out = torch.zeros(T, h, dtype=y.dtype, device=y.device).scatter_add(0, gmap, unperm)
    return permuted, out


def index_select_path(x, y, probs_sorted, src_token, T, h):
    """core_v0.7+ moe_utils.permute / unpermute (unfused), forward."""
    permuted = x.index_select(0, src_token)
    weighted = y * probs_sorted.unsqueeze(-1)
    out = torch.zeros(T, h, dtype=y.dtype, device=y.device)
    out = out.scatter_add(0, src_token.unsqueeze(1).expand(-1, h), weighted)
    return permuted, out


def index_copy_path(x, y, probs_tk, sorted_indices, T, k, h):
    """core_v0.7-v0.9 moe_utils.permute / unpermute (unfused), forward; ``sorted_indices`` is the argsort of the
    flattened [T*k] expert ids (row r of the permuted tensor is copy sorted_indices[r] % k of token // k)."""
    permuted = x.index_select(0, sorted_indices // k)
    unperm = torch.zeros(T * k, h, dtype=y.dtype, device=y.device).index_copy(0, sorted_indices, y)
    out = (unperm.reshape(-1, k, h) * probs_tk.unsqueeze(-1)).sum(dim=1)
    return permuted, out


def sequential_assembly(y, splits):
    """SequentialMLP: output_local = zeros_like(rows); output_local[start:end] = expert output, per expert."""
    out = torch.zeros_like(y)
    start = 0
    for n in splits:
        out[start:start + n] = y[start:start + n]
        start += n
    return out


class MegatronCrossEntropy(torch.autograd.Function):
    """core_v0.6 _VocabParallelCrossEntropy at one tensor-parallel rank (the all-reduces are no-ops)."""

    @staticmethod
    def forward(ctx, logits, target):
        logits_max = torch.max(logits, dim=-1)[0]
        logits = logits - logits_max.unsqueeze(-1)
        arange = torch.arange(logits.size(0), device=logits.device)
        predicted = logits[arange, target].clone()
        exp_logits = logits
        torch.exp(logits, out=exp_logits)
        sum_exp = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        exp_logits.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(exp_logits, target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target = ctx.saved_tensors
        grad = softmax
        arange = torch.arange(grad.size(0), device=grad.device)
        grad[arange, target] -= 1.0
        grad.mul_(grad_output.unsqueeze(-1))
        return grad, None


def timed(fn, out_bytes: int, args) -> dict:
    return bench(fn, target_s=args.target_s, repeats=args.repeats, out_bytes=out_bytes,
                 max_graph_bytes=args.graph_bytes)


def run_shape(args, T: int, k: int, h: int, t0: float) -> None:
    R = T * k
    E = 8
    x = torch.randn(T, h, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    y = torch.randn(R, h, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    flat, order, token_of_row = routing(T, k, E)
    scores = torch.rand(R, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    src_token = token_of_row[order].contiguous()
    g_perm = torch.randn(R, h, dtype=torch.bfloat16, device="cuda")
    g_out = torch.randn(T, h, dtype=torch.bfloat16, device="cuda")
    splits = torch.bincount(flat, minlength=E).tolist()
    big = torch.randn(R, h, dtype=torch.bfloat16, device="cuda")

    def gs_fwd():
        return gather_scatter_path(x, y, scores, token_of_row, order, T, h)

    probs_sorted = scores.detach()[order].clone().requires_grad_(True)

    # gradients are returned (torch.autograd.grad), not accumulated into .grad: in the framework they flow on
    # to the previous layer and into the expert backward as new tensors
    def gs_fwd_bwd():
        p, o = gs_fwd()
        return torch.autograd.grad((p, o), (x, y, scores), (g_perm, g_out))

    def is_fwd():
        return index_select_path(x, y, probs_sorted, src_token, T, h)

    def is_fwd_bwd():
        p, o = is_fwd()
        return torch.autograd.grad((p, o), (x, y, probs_sorted), (g_perm, g_out))

    def seq_fwd_bwd():
        return torch.autograd.grad(sequential_assembly(y, splits), (y,), (g_perm,))

    probs_tk = scores.detach().view(T, k).clone().requires_grad_(True)

    def ic_fwd():
        return index_copy_path(x, y, probs_tk, order, T, k, h)

    def ic_fwd_bwd():
        p, o = ic_fwd()
        return torch.autograd.grad((p, o), (x, y, probs_tk), (g_perm, g_out))

    with torch.no_grad():   # the paths compute the same layer output (bf16 atomics reorder the sums)
        p_gs, o_gs = gs_fwd()
        p_is, o_is = is_fwd()
        p_ic, o_ic = ic_fwd()
        check = {"same_permuted": bool(torch.equal(p_gs, p_is) and torch.equal(p_gs, p_ic)),
                 "out_rel_diff": float((o_gs.float() - o_is.float()).norm() / o_is.float().norm()),
                 "out_rel_diff_index_copy": float((o_ic.float() - o_is.float()).norm() / o_is.float().norm())}
        del p_gs, o_gs, p_is, o_is, p_ic, o_ic

    rh = 2 * R * h
    cases = {"copy": (lambda: big.clone(), rh),
             "gather_scatter_fwd": (gs_fwd, 4 * rh), "gather_scatter_fwd_bwd": (gs_fwd_bwd, 8 * rh),
             "index_select_fwd": (is_fwd, 3 * rh), "index_select_fwd_bwd": (is_fwd_bwd, 6 * rh),
             "index_copy_fwd": (ic_fwd, 3 * rh), "index_copy_fwd_bwd": (ic_fwd_bwd, 6 * rh),
             "sequential_experts_fwd_bwd": (seq_fwd_bwd, 3 * rh)}
    copy_s = None
    parts = []
    for name, (fn, out_bytes) in cases.items():
        row = {"kind": "path", "case": name, "T": T, "k": k, "h": h, "R": R, "experts": E, **check}
        try:
            t = timed(fn, out_bytes, args)
            row.update(t)
            if name == "copy":
                copy_s = t["time_s"]
                row["copy_gbps"] = 2 * rh / copy_s / 1e9
            if copy_s:
                row["copy_equiv_bytes"] = t["time_s"] / copy_s * 2 * rh
                row["copy_equiv_per_rh"] = row["copy_equiv_bytes"] / (R * h)
            parts.append(f"{name}={t['time_s'] * 1e6:.0f}us")
        except Exception as exc:  # noqa: BLE001
            record_failure(row, parts, name, exc)
        log_json(args.out, row)
    print(f"[{time.perf_counter() - t0:6.1f}s] T={T} k={k} h={h} {check} " + " ".join(parts), flush=True)


def run_sequential(args, T: int, k: int, h: int, experts: int, t0: float) -> None:
    """SequentialMLP's output assembly alone for ``experts`` local experts (its backward clones the gradient once
    per slice assignment, so the cost grows with the expert count)."""
    R = T * k
    y = torch.randn(R, h, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    g = torch.randn(R, h, dtype=torch.bfloat16, device="cuda")
    big = torch.randn(R, h, dtype=torch.bfloat16, device="cuda")
    splits = [R // experts] * (experts - 1) + [R - (R // experts) * (experts - 1)]
    row = {"kind": "path", "case": "sequential_experts_fwd_bwd", "T": T, "k": k, "h": h, "R": R,
           "experts": experts}
    copy = timed(lambda: big.clone(), 2 * R * h, args)
    fwd = timed(lambda: sequential_assembly(y.detach(), splits), 2 * R * h, args)
    t = timed(lambda: torch.autograd.grad(sequential_assembly(y, splits), (y,), (g,)), 4 * R * h, args)
    row.update(t, copy_gbps=4 * R * h / copy["time_s"] / 1e9, fwd_s=fwd["time_s"],
               copy_equiv_per_rh=t["time_s"] / copy["time_s"] * 4,
               fwd_copy_equiv_per_rh=fwd["time_s"] / copy["time_s"] * 4)
    log_json(args.out, row)
    print(f"[{time.perf_counter() - t0:6.1f}s] sequential E={experts}: fwd {fwd['time_s'] * 1e6:.0f} us, "
          f"fwd+bwd {t['time_s'] * 1e6:.0f} us, {row['copy_equiv_per_rh']:.1f} copy-equivalent B per R*h",
          flush=True)


def run_ce(args, T: int, V: int, t0: float) -> None:
    logits = torch.randn(T, V, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    target = torch.randint(0, V, (T,), device="cuda")
    big = torch.randn(T, V, dtype=torch.float32, device="cuda")

    def ce():
        loss = MegatronCrossEntropy.apply(logits.float(), target)
        return torch.autograd.grad(loss.sum(), (logits,))

    def ce_torch():   # plain PyTorch / torchtitan: F.cross_entropy(pred.float(), labels), mean reduction
        loss = torch.nn.functional.cross_entropy(logits.float(), target)
        return torch.autograd.grad(loss, (logits,))

    row = {"kind": "ce", "case": "ce_unfused", "T": T, "V": V}
    try:
        copy = timed(lambda: big.clone(), 4 * T * V, args)
        t = timed(ce, 12 * T * V, args)
        with torch.no_grad():
            fwd = timed(lambda: MegatronCrossEntropy.apply(logits.float(), target), 8 * T * V, args)
        pt = timed(ce_torch, 12 * T * V, args)
        with torch.no_grad():
            pt_fwd = timed(lambda: torch.nn.functional.cross_entropy(logits.float(), target), 8 * T * V, args)
        row.update(t, copy_s=copy["time_s"], copy_gbps=8 * T * V / copy["time_s"] / 1e9,
                   copy_equiv_per_logit=t["time_s"] / copy["time_s"] * 8, fwd_s=fwd["time_s"],
                   fwd_copy_equiv_per_logit=fwd["time_s"] / copy["time_s"] * 8,
                   torch_s=pt["time_s"], torch_fwd_s=pt_fwd["time_s"])
        print(f"[{time.perf_counter() - t0:6.1f}s] CE T={T} V={V} {t['time_s'] * 1e3:.2f} ms, "
              f"{row['copy_equiv_per_logit']:.1f} copy-equivalent B/logit", flush=True)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        torch.cuda.synchronize()
    log_json(args.out, row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="moe_dispatch_paths.jsonl")
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--target-s", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--graph-bytes", type=int, default=24 << 30)
    parser.add_argument("--only", choices=("all", "sequential_ce", "ce"), default="all",
                        help="sequential_ce: the expert-count sweep of SequentialMLP's assembly and the cross "
                             "entropy only")
    args = parser.parse_args()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    log_json(args.out, {"kind": "env", **env_info()})
    warm_clocks(3.0)
    log_json(args.out, {"kind": "clocks_after_warmup", **gpu_clocks()})
    for experts in (2, 4, 8, 16, 32) if args.only != "ce" else ():
        run_sequential(args, 8192, 2, 2048, experts, t0)
        torch.cuda.empty_cache()
    for T, k, h in SHAPES if args.only == "all" else ():
        if time.perf_counter() - t0 > args.budget_s:
            log_json(args.out, {"kind": "stopped", "T": T, "k": k, "h": h})
            break
        run_shape(args, T, k, h, t0)
        torch.cuda.empty_cache()
    if args.only == "ce":   # the streaming-copy reference of the path rows, for the cross-entropy rows
        big = torch.randn(12288 * 2, 4096, dtype=torch.bfloat16, device="cuda")
        t = timed(lambda: big.clone(), 2 * big.numel(), args)
        log_json(args.out, {"kind": "path", "case": "copy", "T": 12288, "k": 2, "h": 4096, "R": 24576, **t,
                            "copy_gbps": 4 * big.numel() / t["time_s"] / 1e9})
        del big
    for T, V in CE_SHAPES:
        if time.perf_counter() - t0 > args.budget_s:
            log_json(args.out, {"kind": "stopped", "T": T, "V": V})
            break
        run_ce(args, T, V, t0)
        torch.cuda.empty_cache()
    log_json(args.out, {"kind": "clocks_end", **gpu_clocks(), "elapsed_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
