"""``simulator validate [NAME ...] [--cv] [--json]``: the model's error tables against published and measured data."""

from __future__ import annotations


def register(subparsers) -> None:
    from simulator.validation.reports import REPORTS

    parser = subparsers.add_parser("validate", help="error tables against published measurements (as CI checks)")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"tables to print (default all): {', '.join(REPORTS)}")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--cv", action="store_true",
                        help="with `published`: leave-one-source-out error beside the in-sample error, and the "
                             "fitted constants each fold re-fits (opt-in: slower)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.set_defaults(handler=_validate)


def _validate(args) -> int:
    from simulator.errors import UserError
    from simulator.validation.reports import REPORTS

    unknown = [n for n in args.names if n not in REPORTS]
    if unknown:
        raise UserError(f"unknown validation table(s) {unknown}; accepted: {', '.join(REPORTS)}")
    if args.cv:
        if any(n != "published" for n in args.names):
            raise UserError(f"--cv applies to the published table only; got {args.names}: "
                            "run `simulator validate published --cv`")
        return _cross_validate(args)
    reports = [REPORTS[name]() for name in args.names or list(REPORTS)]
    if args.json:
        return _print_json({"reports": {r.name: _report_dict(r) for r in reports}}, reports)
    failed, open_ = [], []
    for report in reports:
        _print_report(report, args.markdown)
        if not report.passed and report.gated:
            failed.append(report.name)
        elif not report.passed:
            open_.append(report.name)
    print(f"{len(reports) - len(failed) - len(open_)} passed, {len(failed)} failed"
          + (f", {len(open_)} open targets ({', '.join(open_)})" if open_ else ""))
    return 1 if failed else 0


def _print_report(report, markdown: bool) -> None:
    from simulator.report.table import render_markdown, render_table

    table = render_markdown if markdown else render_table
    print(table(report.headers, report.rows, title=f"[{report.name}] {report.title}"))
    verdict = "PASS" if report.passed else "FAIL" if report.gated else "OPEN (target not met yet)"
    print(f"{verdict}: {report.summary}\n")


def _report_dict(report) -> dict:
    return {"title": report.title, "headers": list(report.headers), "rows": [list(row) for row in report.rows],
            "summary": report.summary, "passed": report.passed, "gated": report.gated}


def _print_json(obj: dict, reports) -> int:
    import json

    print(json.dumps(obj, indent=2))
    return 1 if any(not r.passed and r.gated for r in reports) else 0


def _cross_validate(args) -> int:
    from simulator.validation.cv_report import NOTHING_REFITTED, constants_report, cv_json, cv_reports

    if args.json:
        return _print_json(cv_json(), [])
    per_run, per_source, summary = cv_reports()
    for report in (constants_report(), per_run, per_source):
        _print_report(report, args.markdown)
    if summary["identical"] and not summary["refitted"]:
        print(NOTHING_REFITTED)
    return 0
