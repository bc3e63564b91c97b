"""``simulator validate [NAME ...]``: the model's error tables against published and measured data."""

from __future__ import annotations


def register(subparsers) -> None:
    from simulator.validation.reports import REPORTS

    parser = subparsers.add_parser("validate", help="error tables against published measurements (as CI checks)")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"tables to print (default all): {', '.join(REPORTS)}")
    parser.add_argument("--markdown", action="store_true")
    parser.set_defaults(handler=_validate)


def _validate(args) -> int:
    from simulator.errors import UserError
    from simulator.report.table import render_markdown, render_table
    from simulator.validation.reports import REPORTS

    unknown = [n for n in args.names if n not in REPORTS]
    if unknown:
        raise UserError(f"unknown validation table(s) {unknown}; accepted: {', '.join(REPORTS)}")
    table = render_markdown if args.markdown else render_table
    failed, open_ = [], []
    for name in args.names or list(REPORTS):
        report = REPORTS[name]()
        print(table(report.headers, report.rows, title=f"[{report.name}] {report.title}"))
        verdict = "PASS" if report.passed else "FAIL" if report.gated else "OPEN (target not met yet)"
        print(f"{verdict}: {report.summary}\n")
        if not report.passed and report.gated:
            failed.append(name)
        elif not report.passed:
            open_.append(name)
    print(f"{len(args.names or REPORTS) - len(failed) - len(open_)} passed, {len(failed)} failed"
          + (f", {len(open_)} open targets ({', '.join(open_)})" if open_ else ""))
    return 1 if failed else 0
