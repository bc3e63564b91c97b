"""``python -m simulator.measure collectives|gemm ...`` (also reached as ``simulator measure``).

Kept free of pydantic/pandas so that it runs on a GPU machine that has only PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.errors import UserError
from simulator.measure.settings import DEFAULT_SETTINGS, OPS, SETTINGS
from simulator.units import parse_quantity


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", required=True)
    coll = sub.add_parser("collectives", help="NCCL collectives (launches torchrun per NCCL setting)")
    coll.add_argument("--out", required=True, help="directory for the nccl-tests-format logs")
    coll.add_argument("--gpus", type=int, default=None, help="GPUs (processes) to use (default: all visible)")
    coll.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                      help=f"comma list of NCCL settings: {', '.join(SETTINGS)} (nvls only when named)")
    coll.add_argument("--ops", default=",".join(OPS), help=f"comma list of: {', '.join(OPS)}")
    coll.add_argument("--min-bytes", default="256", help="smallest size (e.g. 256, 1KiB)")
    coll.add_argument("--max-bytes", default="1GiB", help="largest size")
    coll.add_argument("--factor", type=int, default=4, help="size multiplier per step")
    coll.add_argument("--timeout", type=float, default=None, help="seconds allowed per NCCL setting")
    coll.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    coll.add_argument("--setting", default="default", help=argparse.SUPPRESS)
    gemm = sub.add_parser("gemm", help="matmul throughput per shape on one GPU")
    gemm.add_argument("--out", required=True, help="CSV file to write")
    gemm.add_argument("--dtypes", default="bf16,fp16,fp32,tf32")
    gemm.add_argument("--warmup", type=float, default=5.0, help="seconds of clock warm-up (default 5)")
    gemm.add_argument("--seconds-per-shape", type=float, default=0.2)


def run(args: argparse.Namespace) -> int:
    if args.what == "gemm":
        from simulator.measure.gemm import DTYPES, measure

        dtypes = _choices(args.dtypes, DTYPES, "--dtypes")
        _need_torch()
        measure(args.out, dtypes, warmup_s=args.warmup, seconds_per_shape=args.seconds_per_shape)
        return 0
    from simulator.measure import collectives

    ops = _choices(args.ops, OPS, "--ops")
    low = int(parse_quantity(args.min_bytes, "bytes"))
    high = int(parse_quantity(args.max_bytes, "bytes"))
    if args.worker:
        collectives.run_worker(args.out, args.setting, ops, low, high, args.factor)
        return 0
    settings = _choices(args.settings, tuple(SETTINGS), "--settings")
    torch = _need_torch()
    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 2:
        raise UserError(f"collectives need at least 2 GPUs, found {gpus}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    collectives.topology_report(args.out)
    failures = collectives.launch(args.out, gpus, settings, ops, low, high, args.factor, args.timeout)
    return 1 if failures else 0


def _choices(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    bad = [c for c in chosen if c not in allowed]
    if bad or not chosen:
        raise UserError(f"{flag}: unknown {bad or 'empty list'}; accepted: {', '.join(allowed)}")
    return chosen


def _need_torch():
    try:
        import torch
    except ImportError:
        raise UserError("measuring needs PyTorch with CUDA (pip install torch); the simulator itself does not")\
            from None
    if not torch.cuda.is_available():
        raise UserError("measuring needs a CUDA GPU; torch.cuda.is_available() is False")
    return torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.measure", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
