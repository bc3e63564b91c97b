"""Leave-one-source-out validation of the development set (issue 28 item 5): for each source, every constant fitted
on published runs is re-fitted on the other sources' runs and the left-out source's runs are predicted with it.

A fold's error is a run's signed error predicted / measured - 1 with constants that never saw its source; the
in-sample error uses the constants fitted on every source. Reported per run, per source and overall: mean |error|
and the signed median of each, and the ratio LOSO mean / in-sample mean (issue 28's targets: ratio <= 1.3, the
development set's signed median within +-3%). Constants not fitted on the development set
(:mod:`simulator.validation.fitted`: published tables outside it, kernel benchmarks, H200 measurements) are the
same in every fold; when no constant is fitted on it, every fold predicts what the shipped model predicts and
the leave-one-source-out error equals the in-sample error (``identical`` in the result).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from simulator.validation.fitted import FITTED_CONSTANTS, FittedConstant, refitted

TARGETS = {"loso_over_in_sample": 1.3, "median_signed": 0.03}
"""Issue 28's bars: LOSO mean |error| <= 1.3 x in-sample, signed median within +-3%."""

SOURCE_FAMILIES = (("MLPerf Training", "mlperf"), ("Smith et al. 2022", "mt-nlg"), ("BigScience", "bloom"),
                   ("FlagPerf", "flagperf"), ("Megatron-Core MoE README", "mcore-moe-readme"),
                   ("Megatron MoE model zoo", "moe-model-zoo"))
"""A fold leaves out one publisher: the ``source`` field's leading words name it. The four MLPerf rounds (one
submitter, one NeMo lineage) are one source, and so are FlagPerf's Megatron-Core and Pai-Megatron cases (one
benchmark suite and publisher), so that a fold never keeps a sibling of what it leaves out."""


def source_family(source: str) -> str:
    """The fold a run's ``source`` field belongs to (:data:`SOURCE_FAMILIES`)."""
    for prefix, family in SOURCE_FAMILIES:
        if source.startswith(prefix):
            return family
    raise ValueError(f"runs.csv source {source[:80]!r} names no known source family; add its prefix to "
                     "simulator/validation/cv.py SOURCE_FAMILIES")


@dataclass(frozen=True)
class CvRun:
    """One run for cross-validation: its source family, measured seconds per step and the prediction as a
    function of the re-fitted constants' values (name -> value; empty = every constant as shipped)."""

    id: str
    source: str
    measured_s: float
    predict: Callable[[Mapping[str, float]], float]


@dataclass(frozen=True)
class ShippedPrediction:
    """The prediction of the shipped model, ``simulate()``'s step time. No registered constant is fitted on the
    development set, so no override reaches ``simulate()``; a value passed here is a constant registered with a
    ``refit`` but no override path, an error."""

    run_id: str
    step_s: float

    def __call__(self, values: Mapping[str, float]) -> float:
        if values:
            raise ValueError(f"{self.run_id}: constants {sorted(values)} are re-fitted per fold but simulate() has "
                             "no override for them; add one in simulator/validation/cv.py")
        return self.step_s


@dataclass(frozen=True)
class RunCv:
    """One run's in-sample and leave-one-source-out predictions (s) and the sources its fold fitted on."""

    id: str
    source: str
    measured_s: float
    in_sample_s: float
    loso_s: float
    fitted_on: tuple[str, ...]

    @property
    def in_sample_error(self) -> float:
        return self.in_sample_s / self.measured_s - 1

    @property
    def loso_error(self) -> float:
        return self.loso_s / self.measured_s - 1


def fit(constants: Sequence[FittedConstant], runs: Sequence[CvRun]) -> dict[str, float]:
    """Every re-fittable constant fitted on ``runs``."""
    return {c.name: c.refit(runs) for c in refitted(constants)}


def leave_one_source_out(runs: Sequence[CvRun],
                         constants: Sequence[FittedConstant] = FITTED_CONSTANTS) -> list[RunCv]:
    """In-sample and LOSO prediction of every run (module docstring); runs in their given order."""
    everything = fit(constants, runs)
    out = {}
    for source in dict.fromkeys(r.source for r in runs):
        train = [r for r in runs if r.source != source]
        if refitted(constants) and not train:
            raise ValueError(f"source {source} is the only one: nothing to fit its fold on")
        values = fit(constants, train)
        sources = tuple(dict.fromkeys(r.source for r in train))
        for r in runs:
            if r.source == source:
                out[r.id] = RunCv(r.id, source, r.measured_s, r.predict(everything), r.predict(values), sources)
    return [out[r.id] for r in runs]


def _stats(errors: Sequence[float]) -> dict[str, float]:
    return {"mean_abs": statistics.fmean(abs(e) for e in errors), "median_signed": statistics.median(errors)}


def summary(rows: Sequence[RunCv], constants: Sequence[FittedConstant] = FITTED_CONSTANTS) -> dict:
    """The JSON of ``simulator validate published --cv --json`` (docs/validation_cv.md)."""
    ins, loso = _stats([r.in_sample_error for r in rows]), _stats([r.loso_error for r in rows])
    sources = {}
    for source in dict.fromkeys(r.source for r in rows):
        sel = [r for r in rows if r.source == source]
        a, b = _stats([r.in_sample_error for r in sel]), _stats([r.loso_error for r in sel])
        sources[source] = {"runs": len(sel), "in_sample_mean_abs": a["mean_abs"], "loso_mean_abs": b["mean_abs"],
                           "in_sample_median_signed": a["median_signed"], "loso_median_signed": b["median_signed"]}
    ratio = loso["mean_abs"] / ins["mean_abs"] if ins["mean_abs"] else float("nan")
    return {
        "folds": "source", "refitted": [c.name for c in refitted(constants)],
        "fixed": [c.name for c in constants if not c.fitted_on],
        "identical": all(r.loso_s == r.in_sample_s for r in rows),
        "in_sample": ins, "loso": loso, "loso_over_in_sample": ratio, "targets": dict(TARGETS),
        "meets_targets": bool(ratio <= TARGETS["loso_over_in_sample"]
                              and abs(loso["median_signed"]) <= TARGETS["median_signed"]),
        "sources": sources,
        "runs": [{"id": r.id, "source": r.source, "measured_s": r.measured_s, "in_sample_s": r.in_sample_s,
                  "loso_s": r.loso_s, "in_sample_error": r.in_sample_error, "loso_error": r.loso_error,
                  "fitted_on": list(r.fitted_on)} for r in rows],
    }


def published_cv_runs() -> list[CvRun]:
    """The development set as :class:`CvRun`: measured step time, source family, the shipped prediction."""
    from simulator.validation.published import published_runs, read_runs

    source_of = {row["id"]: source_family(row["source"]) for row in read_runs()}
    return [CvRun(r.id, source_of[r.id], r.measured_s, ShippedPrediction(r.id, r.predicted_s))
            for r in published_runs()]
