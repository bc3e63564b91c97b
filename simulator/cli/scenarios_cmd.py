"""``simulator scenarios [--json]``: the scenarios shipped inside the package, by the name ``run`` accepts."""

from __future__ import annotations

from simulator.cli.output import print_json
from simulator.resources import scenario_summary, shipped_scenarios


def register(subparsers) -> None:
    parser = subparsers.add_parser("scenarios", help="list the shipped scenarios (simulator run NAME runs one)")
    parser.add_argument("--json", action="store_true", help="print a list of {name, scenario_name, description, path}")
    parser.set_defaults(handler=_scenarios)


def _scenarios(args) -> int:
    rows = [{"name": name, "scenario_name": summary["name"], "description": summary["description"], "path": str(path)}
            for name, path in shipped_scenarios().items() for summary in (scenario_summary(path),)]
    if args.json:
        print_json(rows, indent=2)
        return 0
    width = max((len(row["name"]) for row in rows), default=0)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['description']}")
    print(f"\n{len(rows)} shipped scenarios: simulator run NAME (or serve, search, memory, sweep NAME)")
    return 0
