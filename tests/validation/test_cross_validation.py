"""Leave-one-source-out validation (issue 28 item 5): the fold engine on a hand-made set, the bookkeeping (no run
is scored by constants fitted on its own source), the registry of fitted constants and the CLI path."""

import json
import statistics

import pytest

from simulator.cli import main
from simulator.validation import cv
from simulator.validation.fitted import FITTED_CONSTANTS, FittedConstant, refitted, registry_rows


def _scaled(base_s):
    """A toy model: the run's base time times the fitted constant ``k``."""
    return lambda values: base_s * values["k"]


def _ratio_mean(runs):
    """Re-fit ``k`` as the mean of measured / base over the runs it is given."""
    return statistics.fmean(r.measured_s / r.base_s for r in runs)


class _Run(cv.CvRun):
    @property
    def base_s(self):
        return self.predict({"k": 1.0})


MINI = [_Run("a1", "A", 2.0, _scaled(1.0)), _Run("a2", "A", 4.0, _scaled(2.0)),
        _Run("b1", "B", 1.0, _scaled(1.0)), _Run("c1", "C", 1.5, _scaled(1.0))]
K = FittedConstant("k", "toy scale", lambda: 1.0, "toy", "the mini set", fitted_on=("A", "B", "C"), refit=_ratio_mean)


def test_mini_set_loso_by_hand():
    """Ratios measured / base: A 2, 2; B 1; C 1.5. In-sample k = mean(2, 2, 1, 1.5) = 1.625: errors -18.75%,
    -18.75%, +62.5%, +8.33% (mean |error| 0.2708). Leaving A out, k = mean(1, 1.5) = 1.25: a1 and a2 -37.5%;
    leaving B out, k = 5.5/3: b1 +83.3%; leaving C out, k = 5/3: c1 1.6667/1.5 - 1 = +11.1%. LOSO mean |error|
    (0.375 + 0.375 + 0.8333 + 0.1111) / 4 = 0.4236, ratio 1.564; LOSO signed median (-0.375 + 0.1111) / 2."""
    rows = cv.leave_one_source_out(MINI, (K,))
    assert [r.in_sample_error for r in rows] == pytest.approx([-0.1875, -0.1875, 0.625, 1.625 / 1.5 - 1])
    assert [r.loso_error for r in rows] == pytest.approx([-0.375, -0.375, 5.5 / 3 - 1, (5 / 3) / 1.5 - 1])
    s = cv.summary(rows, (K,))
    assert s["in_sample"]["mean_abs"] == pytest.approx(1.0833333 / 4)
    assert s["loso"]["mean_abs"] == pytest.approx(1.6944444 / 4)
    assert s["loso_over_in_sample"] == pytest.approx(1.6944444 / 1.0833333, rel=1e-6)
    assert s["loso"]["median_signed"] == pytest.approx((-0.375 + (5 / 3) / 1.5 - 1) / 2)
    assert s["sources"]["A"]["loso_mean_abs"] == pytest.approx(0.375)
    assert s["sources"]["B"]["in_sample_median_signed"] == pytest.approx(0.625)
    assert not s["identical"] and not s["meets_targets"] and s["refitted"] == ["k"]


def test_no_run_is_scored_by_constants_fitted_on_its_own_source():
    seen = []

    def recording_refit(runs):
        seen.append({r.source for r in runs})
        return _ratio_mean(runs)

    k = FittedConstant("k", "toy scale", lambda: 1.0, "toy", "the mini set", ("A", "B", "C"), recording_refit)
    rows = cv.leave_one_source_out(MINI, (k,))
    assert seen == [{"A", "B", "C"}, {"B", "C"}, {"A", "C"}, {"A", "B"}]   # in-sample, then one fold per source
    for r in rows:
        assert r.source not in r.fitted_on and set(r.fitted_on) == {"A", "B", "C"} - {r.source}


def test_one_source_alone_has_nothing_to_fit_on():
    with pytest.raises(ValueError, match="nothing to fit its fold on"):
        cv.leave_one_source_out(MINI[:2], (K,))


def test_a_refit_needs_fitted_on_and_the_reverse():
    with pytest.raises(ValueError, match="needs a refit"):
        FittedConstant("x", "x", lambda: 1.0, "toy", "d", fitted_on=("A",))
    with pytest.raises(ValueError, match="needs a refit"):
        FittedConstant("x", "x", lambda: 1.0, "toy", "d", refit=_ratio_mean)


def test_the_shipped_prediction_refuses_a_refitted_value():
    """A constant registered with a refit but no override into simulate() must not be silently ignored."""
    with pytest.raises(ValueError, match="no override"):
        cv.ShippedPrediction("run", 3.0)({"k": 1.2})
    assert cv.ShippedPrediction("run", 3.0)({}) == 3.0


def test_source_families_of_the_development_set():
    from simulator.validation.published import read_runs

    families = [cv.source_family(r["source"]) for r in read_runs()]
    assert sorted(set(families)) == ["bloom", "flagperf", "mcore-moe-readme", "mlperf", "moe-model-zoo", "mt-nlg"]
    assert families.count("mlperf") == 10 and families.count("flagperf") == 13 and families.count("mt-nlg") == 3
    with pytest.raises(ValueError, match="no known source family"):
        cv.source_family("A new benchmark suite, someone/repo@abc")


def test_registry_reads_the_shipped_values():
    """The registry reads each value from its home, so it cannot drift: Korthikanti's A100 fit 0.820 / 0.710 and
    the 0.67 interference, the H200 kit's 0.720, DeepEP's 0.690."""
    values = {c.name: c.read() for c in FITTED_CONSTANTS}
    assert values["compute_efficiency.yaml ampere.peak_fraction.bf16/fp16"] == 0.820
    assert values["compute_efficiency.yaml ampere.memory_efficiency"] == 0.710
    assert values["overlap.yaml overlap_interference"] == 0.67
    assert values["compute_efficiency.yaml hopper.peak_fraction.bf16/fp16"] == (0.720, 0.693)
    assert values["moe/coefficients.py normal_nvlink_efficiency"] == 0.690
    assert len(registry_rows()) == len(FITTED_CONSTANTS)
    assert refitted() == ()   # the audit's finding (fitted.py docstring); a new dev-set fit must register a refit


def test_development_set_loso_equals_in_sample_when_nothing_is_refitted():
    rows = cv.leave_one_source_out(cv.published_cv_runs())
    s = cv.summary(rows)
    assert s["identical"] and s["loso_over_in_sample"] == pytest.approx(1.0)
    assert len(rows) == 37 and len(s["sources"]) == 6


def test_cli_cv_prints_in_sample_beside_loso(capsys):
    assert main(["validate", "published", "--cv"]) == 0
    out = capsys.readouterr().out
    assert "[constants]" in out and "[published-cv]" in out and "[sources-cv]" in out
    assert "leave-one-source-out equals in-sample" in out
    assert "mt-nlg" in out and "LOSO" in out


def test_cli_cv_json_keys(capsys):
    assert main(["validate", "--cv", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    s = obj["cv"]
    assert {"folds", "refitted", "fixed", "identical", "in_sample", "loso", "loso_over_in_sample", "targets",
            "meets_targets", "sources", "runs"} <= set(s)
    assert set(s["runs"][0]) == {"id", "source", "measured_s", "in_sample_s", "loso_s", "in_sample_error",
                                 "loso_error", "fitted_on"}
    assert len(obj["constants"]) == len(FITTED_CONSTANTS) and obj["constants"][0]["fitted_on_sources"] == []


def test_cli_cv_on_another_table_is_a_user_error(capsys):
    assert main(["validate", "memory", "--cv"]) == 2
    assert "--cv applies to the published table only" in capsys.readouterr().err


def test_cli_json_without_cv(capsys):
    assert main(["validate", "memory", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["reports"]["memory"]["passed"] is True and obj["reports"]["memory"]["headers"][0] == "model"
