"""``simulator serve SCENARIO [--json] [--bench] [--csv FILE] [--plot FILE]`` (docs/serving.md)."""

from __future__ import annotations

from simulator.cli.args import output_path, plot_path, scenario_path
from simulator.cli.output import print_json


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="serving: prefill/decode step time, TTFT, TPOT, throughput "
                                                "(scenario with a serving: section)")
    serve.add_argument("scenario", type=scenario_path, help="scenario YAML with training.mode: inference and a serving: section")
    serve.add_argument("--json", action="store_true", help="print the JSON object of docs/serving/outputs.md")
    serve.add_argument("--bench", action="store_true",
                       help="simulate the whole request stream (serving.workload, serving.num_requests) and report "
                            "throughput and TTFT / TPOT / ITL / e2e as vLLM's and SGLang's benchmark scripts do")
    serve.add_argument("--csv", metavar="FILE", type=output_path,
                       help="write the latency-throughput curve (one row per concurrency; the static batch when "
                            "serving.concurrency is not set) as CSV")
    serve.add_argument("--plot", metavar="FILE", type=plot_path,
                       help="draw the latency-throughput curve and the decode step breakdown into FILE")
    serve.add_argument("--force-calibration", action="store_true",
                       help="apply system.calibration even if it was measured on another system (a warning)")
    serve.set_defaults(handler=_serve)


def _serve(args) -> int:
    from simulator.cli.run_cmd import load
    from simulator.entries.serve import simulate_bench, simulate_serving
    from simulator.errors import UserError
    from simulator.report.serving import curve_rows, render_serving
    from simulator.scenario.document import read_document

    try:
        scenario = load(args.scenario, args.force_calibration)
        result = simulate_serving(scenario)
        bench = simulate_bench(scenario) if args.bench else None
    except UserError as exc:  # a rule checked while serving (the cache, the replicas): name the file and line
        if exc.file is None and exc.key_path:
            raise read_document(args.scenario).locate(exc) from None
        raise
    if args.json:
        print_json({**result.to_dict(), **({"bench": bench} if bench is not None else {})}, indent=2)
    else:
        print(render_serving(result))
        if bench is not None:
            print(render_bench(bench))
    if args.csv:
        import pandas as pd

        from simulator.report.files import write_text

        write_text(args.csv, pd.DataFrame(curve_rows(result)).to_csv(index=False))
        print(f"wrote {args.csv}") if not args.json else None
    if args.plot:
        from simulator.report.serving import plot_serving

        path = plot_serving(result, args.plot)
        if not args.json:
            print(f"wrote {path}")
    return 0


def render_bench(b: dict) -> str:
    """The ``--bench`` block of the text report: throughput over the whole run, then the latency statistics (ms)."""
    lines = [f"benchmark: {b['requests']:,} requests in {b['duration_s']:.4g} s (ramp-up and drain included)",
             f"  request throughput  {b['request_throughput']:.4g} requests/s",
             f"  output throughput   {b['output_tokens_per_s']:.4g} tokens/s",
             "  latency (ms)          mean         p50         p90         p99"]
    for name in ("ttft", "tpot", "itl", "e2e"):
        st = b[f"{name}_s"]
        cells = ["-" if st[k] is None else f"{st[k] * 1e3:,.2f}" for k in ("mean", "p50", "p90", "p99")]
        lines.append(f"  {name.upper():<16}" + "".join(f"{c:>12}" for c in cells))
    return "\n".join(lines)
