"""``simulator run`` on a scenario with a ``multimodal:`` section (docs/multimodal.md)."""

from __future__ import annotations

from simulator.cli.output import print_json
from simulator.errors import UserError
from simulator.multimodal.report import render_text, summary, to_dict
from simulator.multimodal.scenario import is_multimodal, load_multimodal, simulate_multimodal

__all__ = ["is_multimodal", "run_multimodal"]


def run_multimodal(args) -> int:
    if args.trace or args.plot:
        raise UserError("--trace and --plot are not available for multimodal scenarios yet")
    result = simulate_multimodal(load_multimodal(args.scenario))
    if args.json:
        print_json(to_dict(result), indent=2)
    elif args.csv:
        row = summary(result)
        print(",".join(row))
        print(",".join(str(v) for v in row.values()))
    else:
        print(render_text(result))
    return 0
