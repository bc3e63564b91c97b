"""``simulator measure collectives|gemm``: the calibration kit (needs PyTorch and GPUs; see simulator.measure)."""

from __future__ import annotations

from simulator.measure.__main__ import add_arguments, run


def register(subparsers) -> None:
    parser = subparsers.add_parser("measure", help="measure NCCL collectives or GEMMs on this machine's GPUs")
    add_arguments(parser)
    parser.set_defaults(handler=run)
