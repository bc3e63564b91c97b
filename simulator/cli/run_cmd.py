"""``simulator run [SCENARIO]``: until the step-time engine lands, prints the scenario's system and topology."""

from __future__ import annotations

from pathlib import Path

from simulator.report.hardware import topology_summary
from simulator.scenario import load_scenario
from simulator.topology import Topology

DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="evaluate a scenario (default: scenarios/quickstart.yaml)")
    parser.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO), help="scenario YAML")
    parser.set_defaults(handler=_run)


def _run(args) -> int:
    scenario = load_scenario(args.scenario)
    name = scenario.spec.name or Path(args.scenario).stem
    print(f"scenario {name}: {scenario.gpus} GPUs on {scenario.cluster.nodes} x {scenario.cluster.node.name}")
    print(topology_summary(Topology(scenario.cluster)))
    return 0
