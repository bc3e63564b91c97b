"""``simulator collective`` and ``simulator calibrate`` (docs/interface.md)."""

from __future__ import annotations

import argparse
import sys

from simulator.cli.args import bounded_int, output_path, plot_path, positive_int
from simulator.cli.output import print_json
from simulator.collectives import (
    OPS,
    calibrate,
    calibration_to_yaml,
    check_calibration_system,
    collective_table,
    format_errors,
    format_table,
    load_calibration,
    placement_for_profile,
    plot_busbw,
)
from simulator.errors import UserError
from simulator.hardware import load_node
from simulator.limits import MAX_COLLECTIVE_BYTES, MAX_GPUS, MAX_NODES, MAX_YAML_BYTES
from simulator.report.files import write_text
from simulator.units import parse_quantity

PROTOCOLS = ("auto", "ll", "ll128", "simple")
#: every --algo docs/interface.md names; which ones an operation has is checked by the model (collectives.model)
ALGOS = ("auto", "all", "ring", "tree", "nvls", "nvls_tree", "hierarchical", "direct", "pat", "one_shot", "two_shot")


def register(subparsers) -> None:
    coll = subparsers.add_parser("collective", help="time of a collective on a placed group of GPUs")
    _placement_arguments(coll)
    coll.add_argument("--op", required=True, choices=OPS)
    coll.add_argument("--bytes", required=True, dest="sizes",
                      help="comma list and/or START:END (x2 steps) with units, e.g. 1KiB:4GiB or 1048576,64MiB")
    coll.add_argument("--algo", default="auto", choices=ALGOS,
                      help="auto (default), all (table and plot only), or one algorithm the operation has")
    coll.add_argument("--proto", default="auto", choices=PROTOCOLS)
    coll.add_argument("--calibration", help="calibration YAML from `simulator calibrate`")
    coll.add_argument("--force-calibration", action="store_true",
                      help="apply a calibration measured on another system (a warning instead of an error)")
    coll.add_argument("--no-nvls", action="store_true", help="NVLink SHARP off (as NCCL_NVLS_ENABLE=0)")
    coll.add_argument("--net-issue", default="cpu_proxy", choices=("cpu_proxy", "ibgda"),
                      help="who posts network work (default cpu_proxy)")
    coll.add_argument("--json", action="store_true", help="JSON array, one object per size")
    coll.add_argument("--plot", metavar="FILE", type=plot_path, help="bus bandwidth vs size plot (png, svg, pdf)")
    coll.set_defaults(handler=_collective)

    cal = subparsers.add_parser("calibrate", help="fit link parameters from nccl-tests logs, or an implementation "
                                "profile from a PyTorch profiler trace (--trace)")
    _placement_arguments(cal, required=False)
    cal.add_argument("--op", choices=OPS, help="operation of every file (default: from each file)")
    cal.add_argument("--setting", help="NCCL setting of every file (default: from the file name)")
    cal.add_argument("--no-nvls", action="store_true", help="the runs had NVLink SHARP off")
    cal.add_argument("files", nargs="*", metavar="MEASUREMENT_FILE")
    cal.add_argument("--out", type=output_path, help="calibration YAML (nccl-tests logs) or implementation profile "
                     "YAML (--trace; default: the trace's name with .profile.yaml) to write")
    cal.add_argument("--trace", metavar="TRACE", help="a Kineto trace (.json or .json.gz from torch.profiler's "
                     "export_chrome_trace): write an implementation profile and a GEMM efficiency override")
    cal.add_argument("--base", default="pytorch", help="--trace: the profile the written one inherits unset fields "
                     "from (default pytorch)")
    cal.add_argument("--profiler-event-time", metavar="TIME", help="--trace: the profiler's own host cost per "
                     "recorded operator or API call, taken off the host issue time (e.g. 3us; default 0: "
                     "docs/trace_calibration.md)")
    cal.add_argument("--scenario", metavar="SCENARIO", help="--trace: the scenario of the traced run (its model, "
                     "plan, batch and GPU): the trace's GPU must be its GPU, and the memory efficiency is fitted "
                     "so that its step equals the trace's GPU busy time")
    cal.set_defaults(handler=_calibrate)


def _placement_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--system", required=required, help="node profile (simulator hardware list)")
    parser.add_argument("--ranks", required=required, type=bounded_int(2, MAX_GPUS, "a rank count"),
                        help=f"ranks in the group (2 to {MAX_GPUS:,})")
    parser.add_argument("--gpus-per-node", type=positive_int, help="ranks per node (default: as many as fit)")
    parser.add_argument("--nodes", type=bounded_int(1, MAX_NODES, "a node count"),
                        help="nodes the group spans (default: ranks / gpus-per-node)")
    parser.add_argument("--nvlink-domain-nodes", type=positive_int, metavar="N",
                        help="nodes of each multi-node NVLink domain in use (as system.nvlink_domain_nodes; 2 to the "
                             "profile's domain size; default: all)")


def _placement(args, **overrides):
    node = load_node(args.system)
    per_node = args.gpus_per_node or (args.ranks // args.nodes if args.nodes else min(args.ranks, node.gpus))
    if per_node < 1 or per_node > node.gpus:
        raise UserError(f"--gpus-per-node {per_node}: {node.name} has {node.gpus} GPUs per node")
    nodes = args.nodes or -(-args.ranks // per_node)
    if nodes > MAX_NODES:
        raise UserError(f"--ranks {args.ranks} at {per_node} per node span {nodes:,} nodes; a group spans at most "
                        f"{MAX_NODES:,} (docs/errors.md)")
    if per_node * nodes != args.ranks:
        raise UserError(f"--ranks {args.ranks} != --gpus-per-node {per_node} x --nodes {nodes}")
    if args.no_nvls:
        overrides["nvls"] = False
    if args.nvlink_domain_nodes is not None:
        overrides["domain_nodes"] = args.nvlink_domain_nodes
    return placement_for_profile(args.system, args.ranks, per_node, **overrides)


def parse_sizes(text: str) -> list[int]:
    """``1KiB:4GiB`` (doubling) and/or comma-separated sizes with units, in bytes (each at most 1 PiB)."""
    sizes: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if ":" in part:
            bounds = part.split(":")
            if len(bounds) != 2:
                raise UserError(f"--bytes range {part!r} must be START:END (doubling from START), e.g. 1KiB:4GiB")
            start, end = (_size(x, part) for x in bounds)
            if end < start:
                raise UserError(f"--bytes range {part!r} needs START <= END")
            sizes += [start << i for i in range((end // start).bit_length())]
        else:
            sizes.append(_size(part, part))
    if not sizes:
        raise UserError("--bytes names no size")
    return sorted(set(sizes))


def _size(text: str, part: str) -> int:
    value = parse_quantity(text.strip(), "bytes", default_unit="B")
    if not 1 <= value <= MAX_COLLECTIVE_BYTES:
        raise UserError(f"--bytes {part!r}: each size must be between 1 byte and 1 PiB ({MAX_COLLECTIVE_BYTES} bytes)")
    return int(value)


def _calibration(args):
    if not args.calibration:
        return None
    calibration = load_calibration(args.calibration)
    warning = check_calibration_system(calibration, load_node(args.system).name, args.calibration,
                                       args.force_calibration)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return calibration


def _collective(args) -> int:
    if args.algo == "all" and args.json:
        raise UserError("--algo all is for the table and the plot; --json needs one algorithm or auto")
    sizes = parse_sizes(args.sizes)
    placement = _placement(args, net_issue=args.net_issue)
    rows = collective_table(placement, args.op, sizes, args.algo, args.proto, _calibration(args))
    if args.json:
        print_json(rows, indent=1)
    else:
        print(format_table(rows))
    if args.plot:
        plot_busbw(rows, args.plot, title=f"{args.op} on {args.ranks} x {args.system}")
        print(f"wrote {args.plot}")
    return 0


def _calibrate(args) -> int:
    if args.trace:
        if args.files or args.ranks or args.op or args.setting:
            raise UserError("--trace reads one profiler trace: leave out nccl-tests files, --ranks, --op and "
                            "--setting (they belong to the link calibration)")
        from simulator.cli.trace_cmd import calibrate_from_trace

        return calibrate_from_trace(args)
    if args.profiler_event_time or args.base != "pytorch" or args.scenario:
        raise UserError("--profiler-event-time, --base and --scenario belong to --trace")
    missing = [flag for flag, value in (("--system", args.system), ("--ranks", args.ranks), ("--out", args.out))
               if not value] + ([] if args.files else ["MEASUREMENT_FILE"])
    if missing:
        raise UserError(f"calibrate from nccl-tests logs needs {', '.join(missing)} (or --trace TRACE for a "
                        "profiler trace)")
    placement = _placement(args)
    calibration, errors = calibrate(args.files, placement, args.op, args.setting, system=args.system)
    text = calibration_to_yaml(calibration)
    if len(text) > MAX_YAML_BYTES:  # a calibration must load back (simulator.yamlio reads at most MAX_YAML_BYTES)
        raise UserError(f"the calibration would be {len(text):,} bytes, over the {MAX_YAML_BYTES:,} a calibration "
                        "file may have (docs/errors.md): fewer sizes per sendrecv/all_to_all log (their points are "
                        "kept)", file=args.out)
    write_text(args.out, text)
    print(format_errors(errors))
    print(f"wrote {args.out} ({len(calibration.entries)} entries)")
    return 0
