"""``simulator validate published --cv``: the leave-one-source-out tables (:mod:`simulator.validation.cv`) and the
registry of fitted constants (:mod:`simulator.validation.fitted`) as :class:`Report` objects and as JSON."""

from __future__ import annotations

from simulator.validation import cv
from simulator.validation.fitted import FITTED_CONSTANTS, refitted, registry_rows
from simulator.validation.reports import Report, _pct

NOTHING_REFITTED = ("No constant of the model is fitted on published runs of the development set (the registry "
                    "above: each was fitted on a published table outside it, a kernel benchmark or an H200 "
                    "measurement), so every fold predicts what the shipped model predicts: leave-one-source-out "
                    "equals in-sample. Modelling choices made while the development set was in view are not "
                    "constants and no fold can undo them (docs/validation_cv.md).")


def constants_report() -> Report:
    refit = refitted(FITTED_CONSTANTS)
    return Report("constants", "Fitted constants the development set's predictions read, what they were fitted on",
                  ("constant", "what", "shipped value", "fitted on", "folds"), tuple(registry_rows()),
                  f"{len(FITTED_CONSTANTS)} constants, {len(refit)} fitted on the development set", True)


def cv_reports(rows: list[cv.RunCv] | None = None) -> tuple[Report, Report, dict]:
    """The per-run and per-source tables and the summary dict (``cv.summary``)."""
    rows = cv.leave_one_source_out(cv.published_cv_runs()) if rows is None else rows
    s = cv.summary(rows)
    per_run = Report("published-cv", "Development set, leave one source out: step time (s), in-sample vs LOSO",
                     ("run", "source", "measured s", "in-sample s", "error", "LOSO s", "error", "fitted on"),
                     tuple((r.id, r.source, round(r.measured_s, 3), round(r.in_sample_s, 3), _pct(r.in_sample_error),
                            round(r.loso_s, 3), _pct(r.loso_error), f"{len(r.fitted_on)} other sources")
                           for r in rows), _summary_line(s), s["meets_targets"], gated=False)
    per_source = Report("sources-cv", "Per source: mean |error| and signed median, in-sample vs left out",
                        ("source", "runs", "in-sample mean", "LOSO mean", "in-sample median", "LOSO median"),
                        tuple((name, v["runs"], f"{v['in_sample_mean_abs']:.1%}", f"{v['loso_mean_abs']:.1%}",
                               _pct(v["in_sample_median_signed"]), _pct(v["loso_median_signed"]))
                              for name, v in s["sources"].items()),
                        _summary_line(s), s["meets_targets"], gated=False)
    return per_run, per_source, s


def _summary_line(s: dict) -> str:
    return (f"mean |error| in-sample {s['in_sample']['mean_abs']:.1%}, LOSO {s['loso']['mean_abs']:.1%} "
            f"(ratio {s['loso_over_in_sample']:.2f}, target <= {s['targets']['loso_over_in_sample']}); signed "
            f"median in-sample {s['in_sample']['median_signed']:+.1%}, LOSO {s['loso']['median_signed']:+.1%} "
            f"(target +-{s['targets']['median_signed']:.0%})")


def cv_json() -> dict:
    """``simulator validate published --cv --json``: the summary and the registry (docs/validation_cv.md)."""
    *_, s = cv_reports()
    constants = [{"name": c.name, "what": c.what, "value": row[2], "fitted_on_data": row[3],
                  "fitted_on_sources": list(c.fitted_on)}
                 for c, row in zip(FITTED_CONSTANTS, registry_rows(), strict=True)]
    return {"cv": s, "constants": constants}
