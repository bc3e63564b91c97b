"""``simulator schema``: the scenario JSON Schema (point your editor's YAML language server at it)."""

from __future__ import annotations

import json

from simulator.scenario.schema import scenario_json_schema


def register(subparsers) -> None:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of scenario files")
    parser.set_defaults(handler=_schema)


def _schema(args) -> int:
    print(json.dumps(scenario_json_schema(), indent=2))
    return 0
