"""HF generate decoding on one H200 (simulator/validation/data/h200_hf): every row predicted; the rows each host
constant was fitted on are kept apart from the rows that validate it (issue 28: eager and compiled within 10%)."""

import pytest

from simulator.validation.serving_hf import CALIBRATION, hf_rows


@pytest.fixture(scope="module")
def rows():
    return {(r.mode, r.model, r.batch, r.prompt): r for r in hf_rows()}


def test_every_row_is_predicted_and_the_calibration_rows_are_marked(rows):
    assert len(rows) == 12 and sum(r.mode == "eager" for r in rows.values()) == 8
    assert {k for k, r in rows.items() if r.calibration} == CALIBRATION
    # one calibration pair per kernel set, each from rows of its own mode
    assert sorted(m for m, *_ in CALIBRATION) == ["compiled", "compiled", "eager", "eager"]


@pytest.mark.parametrize(("key", "error"), [
    (("eager", "llama-3.2-1b", 1, 2048), -0.007), (("eager", "llama-3.2-1b", 8, 2048), -0.018),
    (("eager", "qwen2.5-0.5b", 1, 512), +0.026), (("eager", "qwen2.5-0.5b", 1, 2048), -0.083),
    (("eager", "qwen2.5-0.5b", 8, 2048), -0.055),
    (("compiled", "qwen2.5-0.5b", 1, 512), +0.036), (("compiled", "qwen2.5-0.5b", 8, 512), -0.047),
])
def test_validation_rows_within_10_percent(rows, key, error):
    r = rows[key]
    assert not r.calibration
    assert r.error == pytest.approx(error, abs=0.002)
    assert abs(r.error) < 0.10


def test_the_row_beyond_10_percent_stays_in_the_table(rows):
    # Llama-3.2-1B eager 1 x 512: 10.71 ms measured (15.1 us per kernel, the fastest of the eight) against 12.78 ms;
    # the same setup's Qwen2.5-0.5B row moved 14% between the two calls (16.12 / 18.33 ms): host noise
    r = rows[("eager", "llama-3.2-1b", 1, 512)]
    assert r.error == pytest.approx(+0.193, abs=0.002)


def test_kernel_counts_match_the_profiler(rows):
    for r in rows.values():
        assert r.kernels_predicted == pytest.approx(r.kernels_measured, rel=0.03)


def test_eager_is_host_bound_and_compiled_is_not(rows):
    for r in rows.values():
        if r.mode == "eager":
            assert r.gpu_s < 0.3 * r.predicted_s
        else:
            assert r.gpu_s > 0.4 * r.predicted_s
