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
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="processes that build the tables (default: 2 where there are 2 CPUs; 1 = this "
                             "process only); the output is the same")
    parser.set_defaults(handler=_validate)


#: tables built in one worker process beside the others (in this process) when --jobs allows: the DeepEP table
#: (sampled routings), the collective tables that share its caches and the serving table, against the training
#: tables (published, whole_run, step, ...): 3.5 and 2.8 s of CPU on a loaded 2-core machine (bench_validate.py)
_WORKER_TABLES = ("deepep", "collectives", "h200", "kit", "serving")


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
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}", key_path="--jobs")
    reports = _build(list(args.names or REPORTS), args.jobs)
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


def _build(names: list[str], jobs: int | None) -> list:
    """The reports of ``names``, in that order; with ``jobs`` > 1 the :data:`_WORKER_TABLES` among them are built
    in a forked worker process while this one builds the rest (every table is a pure function of the shipped
    data). If the worker fails, its tables are built again here, so an error surfaces as in one process."""
    import os

    jobs = min(jobs or os.cpu_count() or 1, 2)
    aside = [name for name in names if name in _WORKER_TABLES]
    if jobs < 2 or not aside or len(aside) == len(names) or not hasattr(os, "fork"):
        return list(_build_here(names).values())
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        future = pool.submit(_build_here, aside)
        built = _build_here([name for name in names if name not in aside])
        try:
            built.update(future.result())
        except Exception:  # noqa: BLE001 - rebuilt in this process, where its error is raised as usual
            built.update(_build_here(aside))
    return [built[name] for name in names]


def _build_here(names: list[str]) -> dict:
    from simulator.validation.reports import REPORTS

    return {name: REPORTS[name]() for name in names}


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
