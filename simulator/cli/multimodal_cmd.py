"""``simulator run`` on a scenario with a ``multimodal:`` section (docs/multimodal.md)."""

from __future__ import annotations

from simulator.cli.output import print_json
from simulator.errors import UserError
from simulator.multimodal.report import render_text, summary, to_dict
from simulator.multimodal.scenario import is_multimodal, load_multimodal, simulate_multimodal

__all__ = ["is_multimodal", "run_multimodal"]


def run_multimodal(args) -> int:
    if args.plot:
        raise UserError("--plot is not available for multimodal scenarios yet (--trace is)")
    result = simulate_multimodal(load_multimodal(args.scenario))
    if args.json:
        print_json(to_dict(result), indent=2)
    elif args.csv:
        row = summary(result)
        print(",".join(row))
        print(",".join(str(v) for v in row.values()))
    else:
        print(render_text(result))
    if args.trace:
        from simulator.report.multimodal_trace import write_multimodal_trace

        print(f"wrote {write_multimodal_trace(result.step, args.trace)}")
    return 0
