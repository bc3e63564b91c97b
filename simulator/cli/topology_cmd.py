"""``simulator topology NAME [--nodes N] [--path A B] [--draw FILE.png] [--graphml FILE]``."""

from __future__ import annotations

from simulator.cli.args import bounded_int, output_path, plot_path
from simulator.hardware import load_cluster
from simulator.limits import MAX_TOPOLOGY_NODES
from simulator.report.hardware import path_table, topology_summary
from simulator.topology import Topology


def register(subparsers) -> None:
    parser = subparsers.add_parser("topology", help="the topology graph of a node profile times N nodes")
    parser.add_argument("name", help="node profile name or path")
    parser.add_argument("--nodes", type=bounded_int(1, MAX_TOPOLOGY_NODES, "a node count"), default=1,
                        help=f"number of nodes (default 1, at most {MAX_TOPOLOGY_NODES}: every GPU, NIC and switch is "
                             "a vertex of the graph)")
    parser.add_argument("--path", nargs=2, metavar=("A", "B"),
                        help="print the route between two GPUs (gpu0, gpu9 global, or n1.gpu1)")
    parser.add_argument("--draw", metavar="FILE.png", type=plot_path, help="draw a layered picture (at most 4 nodes)")
    parser.add_argument("--graphml", metavar="FILE", type=output_path, help="export the graph as GraphML")
    parser.set_defaults(handler=_run)


def _run(args) -> int:
    topology = Topology(load_cluster(args.name, args.nodes))
    print(topology_summary(topology))
    if args.path:
        paths = topology.paths(*args.path)
        print()
        print(path_table(paths[0]))
        if len(paths) > 1:
            print(f"({len(paths)} equally good routes; max-flow over all of them "
                  f"{topology.pair_bandwidth(*args.path) / 1e9:.1f} GB/s)")
    if args.draw:
        from simulator.topology.draw import draw

        shown = draw(topology, args.draw)
        print(f"\nwrote {args.draw} ({len(shown)} of {args.nodes} nodes drawn)")
    if args.graphml:
        from simulator.topology.draw import write_graphml

        write_graphml(topology, args.graphml)
        print(f"wrote {args.graphml}")
    return 0
