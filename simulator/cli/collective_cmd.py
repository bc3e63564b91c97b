"""``simulator collective`` and ``simulator calibrate`` (docs/interface.md)."""

from __future__ import annotations

import argparse
import json

from simulator.cli.args import output_path
from simulator.collectives import (
    ALGORITHMS,
    OPS,
    calibrate,
    calibration_to_yaml,
    collective_table,
    format_errors,
    format_table,
    load_calibration,
    placement_for_profile,
    plot_busbw,
)
from simulator.errors import UserError
from simulator.hardware import load_node
from simulator.report.files import write_text
from simulator.units import parse_quantity

PROTOCOLS = ("auto", "ll", "ll128", "simple")


def register(subparsers) -> None:
    coll = subparsers.add_parser("collective", help="time of a collective on a placed group of GPUs")
    _placement_arguments(coll)
    coll.add_argument("--op", required=True, choices=OPS)
    coll.add_argument("--bytes", required=True, dest="sizes",
                      help="comma list and/or START:END (x2 steps) with units, e.g. 1KiB:4GiB or 1048576,64MiB")
    coll.add_argument("--algo", default="auto", help=f"auto, all, or one of: {', '.join(ALGORITHMS)}")
    coll.add_argument("--proto", default="auto", choices=PROTOCOLS)
    coll.add_argument("--calibration", help="calibration YAML from `simulator calibrate`")
    coll.add_argument("--no-nvls", action="store_true", help="NVLink SHARP off (as NCCL_NVLS_ENABLE=0)")
    coll.add_argument("--net-issue", default="cpu_proxy", choices=("cpu_proxy", "ibgda"),
                      help="who posts network work (default cpu_proxy)")
    coll.add_argument("--json", action="store_true", help="JSON array, one object per size")
    coll.add_argument("--plot", metavar="FILE", type=output_path, help="bus bandwidth vs size plot (png, svg, pdf)")
    coll.set_defaults(handler=_collective)

    cal = subparsers.add_parser("calibrate", help="fit link parameters from nccl-tests logs")
    _placement_arguments(cal)
    cal.add_argument("--op", choices=OPS, help="operation of every file (default: from each file)")
    cal.add_argument("--setting", help="NCCL setting of every file (default: from the file name)")
    cal.add_argument("--no-nvls", action="store_true", help="the runs had NVLink SHARP off")
    cal.add_argument("files", nargs="+", metavar="MEASUREMENT_FILE")
    cal.add_argument("--out", required=True, type=output_path, help="calibration YAML to write")
    cal.set_defaults(handler=_calibrate)


def _placement_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--system", required=True, help="node profile (simulator hardware list)")
    parser.add_argument("--ranks", required=True, type=int, help="ranks in the group")
    parser.add_argument("--gpus-per-node", type=int, help="ranks per node (default: as many as fit)")
    parser.add_argument("--nodes", type=int, help="nodes the group spans (default: ranks / gpus-per-node)")


def _placement(args, **overrides):
    node = load_node(args.system)
    if args.ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {args.ranks}")
    per_node = args.gpus_per_node or (args.ranks // args.nodes if args.nodes else min(args.ranks, node.gpus))
    if per_node < 1 or per_node > node.gpus:
        raise UserError(f"--gpus-per-node {per_node}: {node.name} has {node.gpus} GPUs per node")
    nodes = args.nodes or -(-args.ranks // per_node)
    if per_node * nodes != args.ranks:
        raise UserError(f"--ranks {args.ranks} != --gpus-per-node {per_node} x --nodes {nodes}")
    if args.no_nvls:
        overrides["nvls"] = False
    return placement_for_profile(args.system, args.ranks, per_node, **overrides)


def parse_sizes(text: str) -> list[int]:
    """``1KiB:4GiB`` (doubling) and/or comma-separated sizes with units, in bytes."""
    sizes: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if ":" in part:
            start, end = (int(parse_quantity(x, "bytes", default_unit="B")) for x in part.split(":", 1))
            if start < 1 or end < start:
                raise UserError(f"--bytes range {part!r} needs 1 <= START <= END")
            size = start
            while size <= end:
                sizes.append(size)
                size *= 2
        else:
            size = int(parse_quantity(part, "bytes", default_unit="B"))
            if size < 1:
                raise UserError(f"--bytes {part!r} must be at least 1 byte")
            sizes.append(size)
    if not sizes:
        raise UserError("--bytes names no size")
    return sorted(set(sizes))


def _collective(args) -> int:
    if args.algo != "all" and args.algo != "auto" and args.algo not in ALGORITHMS:
        raise UserError(f"--algo {args.algo!r} is not one of: auto, all, {', '.join(ALGORITHMS)}")
    if args.algo == "all" and args.json:
        raise UserError("--algo all is for the table and the plot; --json needs one algorithm or auto")
    placement = _placement(args, net_issue=args.net_issue)
    calibration = load_calibration(args.calibration) if args.calibration else None
    rows = collective_table(placement, args.op, parse_sizes(args.sizes), args.algo, args.proto, calibration)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(format_table(rows))
    if args.plot:
        plot_busbw(rows, args.plot, title=f"{args.op} on {args.ranks} x {args.system}")
        print(f"wrote {args.plot}")
    return 0


def _calibrate(args) -> int:
    placement = _placement(args)
    calibration, errors = calibrate(args.files, placement, args.op, args.setting, system=args.system)
    write_text(args.out, calibration_to_yaml(calibration))
    print(format_errors(errors))
    print(f"wrote {args.out} ({len(calibration.entries)} entries)")
    return 0
