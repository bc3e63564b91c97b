"""``simulator schema``: the scenario JSON Schema (point your editor's YAML language server at it)."""

from __future__ import annotations

import json

from simulator.scenario.schema import scenario_json_schema


def register(subparsers) -> None:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of scenario files")
    parser.set_defaults(handler=_schema)


def _schema(args) -> int:
    print(json.dumps(with_multimodal(scenario_json_schema()), indent=2))
    return 0


def with_multimodal(schema: dict) -> dict:
    """Add the ``multimodal:`` section (docs/multimodal.md); a multimodal scenario has no ``model:``, so ``model``
    is no longer required by the schema (the loaders still require one of the two)."""
    from simulator.multimodal.config import MultimodalSection

    section = MultimodalSection.model_json_schema()
    schema.setdefault("$defs", {}).update(section.pop("$defs", {}))
    schema["properties"]["multimodal"] = section
    schema["required"] = [r for r in schema.get("required", []) if r != "model"]
    return schema
