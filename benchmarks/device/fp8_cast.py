"""FP8 recipe overhead kernels on one GPU, as memory-bound ops: amax, scaled cast to e4m3, cast+transpose, and
block-wise (1x128, 128x128) quantization of an [m, k] bf16 tensor.

Each op is timed as PyTorch eager ops (what a plain-PyTorch FP8 recipe launches: several kernels per op) and,
where torch.compile works, as one Inductor-generated (Triton) function (close to what a fused kernel such as
TransformerEngine's cast_transpose achieves). TransformerEngine's own kernels are timed if it is importable.

``bytes`` is the minimal traffic of the op as defined (each input read once, each output written once), so
``gbps = bytes / time_s / 1e9`` is the effective bandwidth: an eager version that reads the tensor three times shows
a third of the bandwidth it really draws. Compare with ``copy_bf16`` (a plain device copy, read + write) and the
4.8 TB/s datasheet peak. Ops (x: [m, k] bf16; s: fp32 scale):

* copy_bf16           y.copy_(x)                                            bytes 4mk
* amax                x.abs().max() (eager: 2 kernels) / one reduction      bytes 2mk
* cast                (x.float() * s).clamp(+-448).to(e4m3)                 bytes 3mk
* cast_transpose      cast, and the transposed FP8 copy [k, m] too         bytes 4mk
* amax_cast_transpose current scaling: amax pass, then cast_transpose       bytes 6mk (two reads of x)
* block1x128          per 1x128 row block: amax, scale, cast               bytes 3mk + 4mk/128 (fp32 scales)
* block1x128_both     1x128 blocks of x and of x^T (row- and column-wise    bytes 4mk + 8mk/128
                      quantization, needed for wgrad/dgrad)
* block128x128        per 128x128 block (weights)                           bytes 3mk + 4mk/16384

Timing: each op runs over rotating copies of x (>= 256 MB in all, so that L2 does not serve repeats), captured
in a CUDA graph, median of repeats (see _bench.py). One JSON line per (shape, op, impl).

    python3 benchmarks/device/fp8_cast.py --out fp8_cast.jsonl [--budget-s 300] [--no-compile]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import bench, env_info, gpu_clocks, log_json, rotating, warm_clocks  # noqa: E402

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
SHAPES = ((8192, 8192), (16384, 8192), (4096, 4096), (16384, 14336), (2048, 8192), (8192, 28672), (16384, 4096),
          (4096, 7168), (1024, 4096))


def op_amax(x, s):
    return x.abs().max()


def op_amax_norm(x, s):
    return torch.linalg.vector_norm(x, float("inf"), dtype=torch.float32)


def op_cast(x, s):
    return (x.float() * s).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def op_cast_transpose(x, s):
    q = (x.float() * s).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, q.t().contiguous()


def op_cast_transpose_fused(x, s):  # the form Inductor can fuse: both outputs computed from x
    y = (x.float() * s).clamp(-FP8_MAX, FP8_MAX)
    return y.to(FP8), y.t().contiguous().to(FP8)


def op_amax_cast_transpose(x, s):
    amax = x.abs().max().float()
    scale = FP8_MAX / amax.clamp(min=1e-12)
    y = (x.float() * scale).clamp(-FP8_MAX, FP8_MAX)
    return y.to(FP8), y.t().contiguous().to(FP8), amax


def op_block1x128(x, s):
    m, k = x.shape
    xb = x.float().view(m, k // 128, 128)
    amax = xb.abs().amax(dim=2, keepdim=True).clamp(min=1e-12)
    return (xb * (FP8_MAX / amax)).to(FP8).view(m, k), (amax / FP8_MAX).view(m, k // 128)


def op_block1x128_both(x, s):
    q, sc = op_block1x128(x, s)
    qt, sct = op_block1x128(x.t(), s)  # x.t() is a strided view: the reshape copies it
    return q, sc, qt, sct


def op_block128x128(x, s):
    m, k = x.shape
    xb = x.float().view(m // 128, 128, k // 128, 128)
    amax = xb.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
    return (xb * (FP8_MAX / amax)).to(FP8).view(m, k), (amax / FP8_MAX).view(m // 128, k // 128)


def op_copy(x, s, out):
    return out.copy_(x)


def ideal_bytes(op: str, m: int, k: int) -> int:
    mk = m * k
    return {"copy_bf16": 4 * mk, "amax": 2 * mk, "amax_norm": 2 * mk, "cast": 3 * mk, "cast_transpose": 4 * mk,
            "cast_transpose_fused": 4 * mk, "amax_cast_transpose": 6 * mk, "block1x128": 3 * mk + 4 * mk // 128,
            "block1x128_both": 4 * mk + 8 * mk // 128, "block128x128": 3 * mk + 4 * mk // 16384}[op]


def out_bytes(op: str, m: int, k: int) -> int:
    return {"amax": 2 * m * k, "amax_norm": 0}.get(op, 12 * m * k)  # generous: eager temporaries in fp32


EAGER = {"amax": op_amax, "amax_norm": op_amax_norm, "cast": op_cast, "cast_transpose": op_cast_transpose,
         "amax_cast_transpose": op_amax_cast_transpose, "block1x128": op_block1x128,
         "block1x128_both": op_block1x128_both, "block128x128": op_block128x128}
COMPILED = ("amax", "cast", "cast_transpose_fused", "amax_cast_transpose", "block1x128", "block1x128_both",
            "block128x128")
ALL_FNS = {**EAGER, "cast_transpose_fused": op_cast_transpose_fused}


def check(fn, x, s) -> float | None:
    """Relative error of the dequantized first output against x (cast ops only): a sanity check."""
    out = fn(x, s)
    q = out[0] if isinstance(out, tuple) else out
    if q.dtype != FP8:
        return None
    if isinstance(out, tuple) and len(out) >= 2 and out[1].dtype == torch.float32 and out[1].dim() == 2:
        sc = out[1]
        m, k = x.shape
        rb, cb = m // sc.shape[0], k // sc.shape[1]
        deq = q.float() * sc.repeat_interleave(rb, 0).repeat_interleave(cb, 1)
    elif isinstance(out, tuple) and len(out) == 3:  # amax_cast_transpose: amax last
        deq = q.float() * (out[2].clamp(min=1e-12) / FP8_MAX)
    else:
        deq = q.float() / s
    return float((deq - x.float()).norm() / x.float().norm())


def time_op(name, impl, fn, m, k, xs, s, target_s, repeats, out_path):
    row = {"kind": "cast", "op": name, "impl": impl, "m": m, "k": k, "bytes": ideal_bytes(name, m, k),
           "copies": len(xs)}
    try:
        if name == "copy_bf16":
            outs = [torch.empty_like(x) for x in xs]
            it = [0]

            def call():
                i = it[0] % len(xs)
                it[0] += 1
                outs[i].copy_(xs[i])
        else:
            row["rel_err"] = check(fn, xs[0], s)
            it = [0]

            def call():
                i = it[0] % len(xs)
                it[0] += 1
                fn(xs[i], s)
        t = bench(call, target_s=target_s, repeats=repeats, out_bytes=out_bytes(name, m, k))
        row.update(**t, gbps=row["bytes"] / t["time_s"] / 1e9)
        msg = f"{row['gbps']:7.0f} GB/s  {t['time_s'] * 1e6:9.1f} us"
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        msg = "ERR " + row["error"][:100]
        torch.cuda.synchronize()
    log_json(out_path, row)
    print(f"  {name:22s} {impl:9s} m={m:6d} k={k:6d} {msg}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="fp8_cast.jsonl")
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--target-s", type=float, default=0.005)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--compiled-shapes", type=int, default=5, help="time compiled ops on the first N shapes")
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    t0 = time.perf_counter()
    torch.manual_seed(0)
    env = env_info()
    warm_clocks(3.0)
    log_json(args.out, {"kind": "env", **env, "clocks_after_warmup": gpu_clocks()})
    try:
        import transformer_engine  # noqa: F401
        have_te = True
    except Exception:  # noqa: BLE001
        have_te = False
    log_json(args.out, {"kind": "note", "transformer_engine_importable": have_te})
    print("transformer_engine importable:", have_te, flush=True)
    s = torch.tensor(FP8_MAX / 4.0, device="cuda")  # randn amax ~ 4-5
    impls = [("eager", None)]
    if not args.no_compile:
        impls.append(("compiled", None))
    for impl, _ in impls:
        compiled = {}
        if impl == "compiled":
            for name in COMPILED:
                compiled[name] = torch.compile(ALL_FNS[name], dynamic=True)  # one compile for all shapes
        for m, k in (SHAPES if impl == "eager" else SHAPES[:args.compiled_shapes]):
            if time.perf_counter() - t0 > args.budget_s:
                print("budget reached", flush=True)
                log_json(args.out, {"kind": "stopped", "impl": impl, "m": m, "k": k})
                break
            xs = rotating(lambda m=m, k=k: torch.randn(m, k, dtype=torch.bfloat16, device="cuda"), 2 * m * k)
            print(f"[{time.perf_counter() - t0:6.1f}s] {impl} m={m} k={k} ({len(xs)} copies)", flush=True)
            if impl == "eager":
                time_op("copy_bf16", impl, None, m, k, xs, s, args.target_s, args.repeats, args.out)
                for name, fn in EAGER.items():
                    time_op(name, impl, fn, m, k, xs, s, args.target_s, args.repeats, args.out)
            else:
                for name, fn in compiled.items():
                    if time.perf_counter() - t0 > args.budget_s:
                        break
                    time_op(name, impl, fn, m, k, xs, s, args.target_s, args.repeats, args.out)
            del xs
            torch.cuda.empty_cache()
    log_json(args.out, {"kind": "clocks_end", **gpu_clocks(), "elapsed_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
