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


def test_the_eager_sweep_run_again_shows_the_host_spread():
    """Call 4 (data README, "Repeatability of eager decoding"): the same eager sweep twice in one command on one
    machine. Kernels per token are unchanged (711 / 1047 at batch 1), yet Qwen2.5-0.5B 1 x 2048 reads 17.58 then
    38.15 ms (2.17x) and Llama-3.2-1B 1 x 2048 12.13 then 25.95 ms: an eager host-bound row is reproducible to tens
    of percent, not to the 10% target. Llama's 1 x 512 case stays the fastest of its model in 4a (9.57 ms against
    12.13-12.46), as in call 2 (10.71 against 12.17-13.00): not noise alone, a host effect not yet modelled."""
    from simulator.validation.serving_hf import eager_repeats, measured

    again = eager_repeats()
    assert len(again) == 8 and all(len(v) == 2 for v in again.values())
    assert again[("qwen2.5-0.5b", 1, 2048)] == pytest.approx((0.01758, 0.03815), abs=1e-4)
    assert again[("llama-3.2-1b", 1, 2048)] == pytest.approx((0.01213, 0.02595), abs=1e-4)
    assert max(max(v) / min(v) for v in again.values()) == pytest.approx(2.17, abs=0.01)
    for file in ("decode_run4a.jsonl", "decode_run4b.jsonl"):
        counts = {(r["model"], r["batch"]): r["per_token_kernels"] for r in measured("eager", file)}
        assert counts[("llama-3.2-1b", 1)] == 711 and counts[("qwen2.5-0.5b", 1)] == 1047
    llama_4a = {(b, p): v[0] for (m, b, p), v in again.items() if m == "llama-3.2-1b"}
    assert min(llama_4a, key=llama_4a.get) == (1, 512)
