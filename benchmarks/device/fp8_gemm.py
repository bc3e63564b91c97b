"""FP8 vs BF16 GEMM efficiency by shape on one GPU: torch._scaled_mm (e4m3 x e4m3 -> bf16) against torch.matmul.

For each GEMM (M, K, N) it times, in the same run:

* ``bf16``: torch.matmul with the operand layouts autograd uses for an nn.Linear (weight W stored [n, k]):
  fwd Y = X @ W.t() (A row-major, B column-major), dgrad dX = dY @ W (both row-major),
  wgrad dW^T = X.t() @ dY (A column-major, B row-major).
* ``fp8_tensor`` / ``fp8_tensor_fastacc``: torch._scaled_mm with one fp32 scale per tensor, use_fast_accum off / on.
* ``fp8_row``: one scale per row of A ([M, 1]) and per column of B ([1, N]) (needs CUDA >= 12.9 in cuBLASLt).
* ``fp8_block``: DeepSeek-V3-style block scaling: A in 1x128 blocks along K (scales [M, K/128], outer-dim-major),
  B in 128x128 blocks (fwd, dgrad: weights) or 1x128 blocks (wgrad: both operands are activations/gradients).
  cuBLAS forbids fast accumulation here.

_scaled_mm needs A row-major and B column-major, so FP8 training keeps transposed FP8 copies: dgrad needs W^T
(a [k, n] copy of the weight), wgrad needs X^T and dY^T (copies of the activations along the token dimension).
The GEMM rows here assume those copies exist (their cost is what fp8_cast.py measures). (M, K, N) of a pass for a
linear of (m tokens, k in, n out): fwd (m, k, n), dgrad (m, n, k), wgrad (k, m, n).

Inputs are random normals quantized per recipe (scale = amax / 448); rel_err is ||C - C_bf16|| / ||C_bf16||
against the bf16 product of the same (unquantized) inputs. Timing: CUDA graph of back-to-back calls, median of
repeats (see _bench.py), after the clocks are warmed. One JSON line per (shape, variant); FLOPs = 2*M*K*N.

    python3 benchmarks/device/fp8_gemm.py --out fp8_gemm.jsonl [--budget-s 600] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import bench, env_info, gpu_clocks, log_json, warm_clocks  # noqa: E402

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0

#: nn.Linear (k in, n out) per model; Llama-3-70B and GPT-3 175B split over TP 8, Llama-3-8B unsplit
LINEARS = {
    "llama3_70b_tp8": {"qkv": (8192, 1280), "o": (1024, 8192), "fc1": (8192, 7168), "fc2": (3584, 8192)},
    "llama3_8b_tp1": {"qkv": (4096, 6144), "o": (4096, 4096), "fc1": (4096, 28672), "fc2": (14336, 4096)},
    "gpt3_175b_tp8": {"qkv": (12288, 4608), "o": (1536, 12288), "fc1": (12288, 6144), "fc2": (6144, 12288)},
    "deepseek_v3_expert": {"fc1": (7168, 4096), "fc2": (2048, 7168)},
}
TOKENS = (4096, 16384, 1024, 8192, 2048)  # training token counts, most wanted first
SKINNY = (64, 128, 256, 512)  # decode-like token counts: fwd only
SQUARE = (1024, 2048, 4096, 8192, 16384)
VARIANTS = ("bf16", "fp8_tensor", "fp8_tensor_fastacc", "fp8_row", "fp8_block")


def gemm_list(quick: bool) -> list[dict]:
    rows = [{"group": "square", "model": "square", "layer": "", "pass": "nn", "m": s, "k": s, "n": s,
             "M": s, "K": s, "N": s} for s in SQUARE]
    tokens = TOKENS[:2] if quick else TOKENS
    for m in tokens:
        for model, layers in LINEARS.items():
            for layer, (k, n) in layers.items():
                for name, (M, K, N) in (("fwd", (m, k, n)), ("dgrad", (m, n, k)), ("wgrad", (k, m, n))):
                    rows.append({"group": "llm", "model": model, "layer": layer, "pass": name, "m": m, "k": k,
                                 "n": n, "M": M, "K": K, "N": N})
    for m in ([] if quick else SKINNY):
        for model, layers in LINEARS.items():
            for layer, (k, n) in layers.items():
                rows.append({"group": "skinny", "model": model, "layer": layer, "pass": "fwd", "m": m, "k": k,
                             "n": n, "M": m, "K": k, "N": n})
    return rows


def _quant_tensor(x: torch.Tensor):
    scale = (x.abs().max().float() / FP8_MAX).clamp(min=1e-12)
    return (x.float() / scale).to(FP8), scale.reshape(())


def _quant_rows(x: torch.Tensor):
    """One scale per row of x ([r, c] -> scales [r, 1])."""
    scale = (x.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)
    return (x.float() / scale).to(FP8), scale


def _quant_1x128(x: torch.Tensor):
    """1x128 blocks along the columns of x ([r, c] -> scales [r, c/128])."""
    r, c = x.shape
    xb = x.float().view(r, c // 128, 128)
    scale = (xb.abs().amax(dim=2, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    return (xb / scale).to(FP8).view(r, c), scale.view(r, c // 128)


def _quant_128x128(x: torch.Tensor):
    r, c = x.shape
    xb = x.float().view(r // 128, 128, c // 128, 128)
    scale = (xb.abs().amax(dim=(1, 3), keepdim=True) / FP8_MAX).clamp(min=1e-12)
    return (xb / scale).to(FP8).view(r, c), scale.view(r // 128, c // 128)


def make_call(variant: str, a: torch.Tensor, bt: torch.Tensor, pass_name: str):
    """A closure computing A @ B for A = a [M, K] and B = bt.t() ([N, K] row-major storage, i.e. B column-major),
    plus a description of the recipe/layout."""
    if variant == "bf16":
        if pass_name == "dgrad":  # dY [m, n] @ W [n, k]: W row-major as stored
            b = bt.t().contiguous()
            return (lambda: torch.matmul(a, b)), "A row, B row (dY @ W)"
        if pass_name == "wgrad":  # X.t() [k, m] @ dY [m, n]: X stored [m, k], dY stored [m, n]
            at = a.t().contiguous()  # storage [m, k]
            b = bt.t().contiguous()  # storage [m, n]
            return (lambda: torch.matmul(at.t(), b)), "A col (X.t()), B row (dY)"
        return (lambda: torch.matmul(a, bt.t())), "A row, B col (X @ W.t())"
    if variant.startswith("fp8_tensor"):
        a8, sa = _quant_tensor(a)
        b8, sb = _quant_tensor(bt)
        fast = variant.endswith("fastacc")
        return (lambda: torch._scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)), \
            "A row, B col; tensor scales"
    if variant == "fp8_row":
        a8, sa = _quant_rows(a)  # [M, 1]
        b8, sb = _quant_rows(bt)  # [N, 1] -> scale_b [1, N]
        sb = sb.t()
        return (lambda: torch._scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16)), \
            "A row, B col; row scales [M,1] x [1,N]"
    if variant == "fp8_block":
        a8, sa = _quant_1x128(a)
        sa = sa.t().contiguous().t()  # outer-dim-major, as cuBLAS wants for 1x128
        if pass_name == "wgrad":
            b8, sb = _quant_1x128(bt)  # [N, K/128]
            sb = sb.t().contiguous().t().t()  # [K/128, N], outer-dim-major
            desc = "A row 1x128, B col 1x128"
        else:
            b8, sb = _quant_128x128(bt)  # [N/128, K/128]
            sb = sb.t()
            desc = "A row 1x128, B col 128x128"
        # scale layouts as in PyTorch's own tests; fall back to contiguous scales if cuBLAS refuses them
        errors = []
        for sa_try, sb_try, note in ((sa, sb, ""), (sa, sb.contiguous(), "; scale_b contiguous"),
                                     (sa.contiguous(), sb.contiguous(), "; both scales contiguous")):
            try:
                torch._scaled_mm(a8, b8.t(), sa_try, sb_try, out_dtype=torch.bfloat16)
                return (lambda sa=sa_try, sb=sb_try: torch._scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16)), \
                    desc + note
            except Exception as exc:  # noqa: BLE001
                errors.append(str(exc)[:200])
        raise RuntimeError(" | ".join(errors))
    raise ValueError(variant)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="fp8_gemm.jsonl")
    parser.add_argument("--budget-s", type=float, default=900.0, help="stop starting new shapes after this")
    parser.add_argument("--target-s", type=float, default=0.008, help="GPU time per timed graph replay")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer shapes (a smoke test)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    env = env_info()
    print(env, flush=True)
    warm_clocks(5.0)
    clocks = gpu_clocks()
    print("clocks after warm-up:", clocks, flush=True)
    log_json(args.out, {"kind": "env", **env, "clocks_after_warmup": clocks})
    shapes = gemm_list(args.quick)
    for i, shape in enumerate(shapes):
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget reached after {i} of {len(shapes)} shapes", flush=True)
            log_json(args.out, {"kind": "stopped", "done_shapes": i, "total_shapes": len(shapes)})
            break
        M, K, N = shape["M"], shape["K"], shape["N"]
        a = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
        bt = torch.randn(N, K, dtype=torch.bfloat16, device="cuda")
        ref = torch.matmul(a, bt.t()).float()
        ref_norm = ref.norm()
        line = []
        for variant in VARIANTS:
            row = {"kind": "gemm", **shape, "variant": variant}
            try:
                call, desc = make_call(variant, a, bt, shape["pass"])
                out = call()
                row["rel_err"] = float((out.float() - ref).norm() / ref_norm)
                del out
                t = bench(call, target_s=args.target_s, repeats=args.repeats, out_bytes=M * N * 2)
                row.update(layout=desc, **t, tflops=2 * M * K * N / t["time_s"] / 1e12)
                line.append(f"{variant}={row['tflops']:.0f}")
            except Exception as exc:  # noqa: BLE001 - record and go on
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                line.append(f"{variant}=ERR")
                torch.cuda.synchronize()
            log_json(args.out, row)
            call = None
        print(f"[{time.perf_counter() - t0:6.1f}s] {shape['group']:6s} {shape['model']:18s} {shape['layer']:4s} "
              f"{shape['pass']:5s} M={M:6d} K={K:6d} N={N:6d} TFLOP/s " + " ".join(line), flush=True)
        del a, bt, ref
    log_json(args.out, {"kind": "clocks_end", **gpu_clocks(), "elapsed_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
