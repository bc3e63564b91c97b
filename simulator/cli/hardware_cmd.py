"""``simulator hardware list`` and ``simulator hardware show NAME``."""

from __future__ import annotations

from simulator.hardware import GpuSpec, list_profiles, load_profile
from simulator.report.hardware import gpu_table, node_table


def register(subparsers) -> None:
    parser = subparsers.add_parser("hardware", help="list and show hardware profiles")
    sub = parser.add_subparsers(dest="hardware_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="names of the shipped node and GPU profiles")
    listing.set_defaults(handler=_list)
    show = sub.add_parser("show", help="a profile as a table (node or GPU)")
    show.add_argument("name", help="profile name (see `simulator hardware list`) or path to a YAML file")
    show.set_defaults(handler=_show)


def _list(args) -> int:
    print("nodes: " + ", ".join(list_profiles("nodes")))
    print("gpus:  " + ", ".join(list_profiles("gpus")))
    return 0


def _show(args) -> int:
    spec = load_profile(args.name)
    print(gpu_table(spec) if isinstance(spec, GpuSpec) else node_table(spec))
    return 0
