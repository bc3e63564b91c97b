"""Speculative decoding against published engine measurements (docs/speculative.md, "Validation"): the three SGLang
setups of simulator/validation/speculative_rows.py (sources, settings and the host-time source in its docstring),
pinned at their errors."""

import pytest

from simulator.entries.serve import serving_context, simulate_serving
from simulator.scenario import load_scenario
from simulator.serving.speculative import iteration
from simulator.validation.speculative_rows import (
    LMSYS_HOST_STEP_S,
    LMSYS_PER_RANK,
    LMSYS_REQUESTS_PER_RANK,
    PR3582_SPEC,
    PR3582_SPEEDUP,
    PR3582_TOK_S,
    PR4716_TOK_S,
    SPEC_HOST_ITERATION_S,
    TOLERANCE,
    lmsys_scenario,
    per_user_rate,
    pr3582_scenario,
    pr4716_scenario,
    speculative_rows,
)


def _iteration(scenario: dict) -> dict:
    sc = load_scenario(scenario)
    ctx, _ = serving_context(sc)
    return iteration(ctx, sc.plan, sc.serving.batch, sc.serving.input_len).to_dict()


@pytest.fixture(scope="module")
def tpot():
    return {spec: simulate_serving(load_scenario(pr3582_scenario(PR3582_SPEC if spec else None))).tpot_s
            for spec in (False, True)}


@pytest.fixture(scope="module")
def lmsys_rate():
    """Modelled per-user rate (tok/s) of each LMSYS configuration."""
    return {spec: per_user_rate(lmsys_scenario(spec)) for spec in LMSYS_PER_RANK}


def test_host_time_is_paid_once_per_iteration():
    """The PR #12128 host time (2.296 x (1/140.52 - 1/159.71) = 1.963 ms) enters the PR #4716 iteration whole, after
    the GPU work (the ``sglang`` profile's ``speculative_overlap: false``): draft 1.763 + verify 14.959 + host 1.963 =
    18.686 ms, against the engine's 5.88 / 234.54 = 25.07 ms (6.4 ms not priced)."""
    assert SPEC_HOST_ITERATION_S == pytest.approx(1.963e-3, abs=1e-6)
    it = _iteration(pr4716_scenario((8, 5.88)))
    assert it["host_s"] == pytest.approx(SPEC_HOST_ITERATION_S, rel=1e-9)
    assert (it["draft_s"], it["verify_s"]) == pytest.approx((1.763e-3, 14.959e-3), abs=2e-6)
    assert it["iteration_s"] == pytest.approx(18.686e-3, abs=2e-6)


def test_pr3582_per_user_rate_misses_by_the_baseline_factor(tpot):
    """Pinned at the honest errors (docs/speculative.md): the modelled baseline step is 6.2 ms against the engine's
    22.9 ms (3.67x its rate); with MTP the iteration is 0.67 ms of draft, 9.91 ms of verify (4 tree nodes) and 1.96 ms
    of host time (PR #12128), so the per-user rate is +185% (+114% with the LMSYS 6.10 ms) and the speed-up 1.36x
    against 1.76x."""
    baseline = PR3582_TOK_S / PR3582_SPEEDUP
    assert 1 / tpot[False] / baseline == pytest.approx(3.672, abs=0.01)
    assert 1 / tpot[True] / PR3582_TOK_S - 1 == pytest.approx(1.846, abs=0.01)
    assert tpot[False] / tpot[True] == pytest.approx(1.364, abs=0.01)
    borrowed = per_user_rate(pr3582_scenario(PR3582_SPEC, LMSYS_HOST_STEP_S))
    assert borrowed / PR3582_TOK_S - 1 == pytest.approx(1.140, abs=0.01)


def test_lmsys_mtp_per_user_rates(lmsys_rate):
    """Pinned at the honest errors (docs/speculative.md): the baseline step is 22.6 ms modelled against the engine's
    39.2 ms (+74% per-user rate), with MTP and the PR #12128 host time +30% and +26% (+37% / +32% without host time);
    none within the issue's 15%."""
    errors = {spec: lmsys_rate[spec] / (rank / LMSYS_REQUESTS_PER_RANK) - 1
              for spec, rank in LMSYS_PER_RANK.items()}
    assert errors[None] == pytest.approx(0.736, abs=0.01)
    assert errors[(2, 2.18)] == pytest.approx(0.302, abs=0.01)
    assert errors[(3, 2.44)] == pytest.approx(0.264, abs=0.01)
    # the speculative rows miss by less than the baseline: the engine's extra time per step is paid once per iteration
    assert errors[(2, 2.18)] < errors[None] and errors[(3, 2.44)] < errors[None]
    assert min(errors.values()) > 0.15


def test_lmsys_mtp_speedups(lmsys_rate):
    """Modelled speed-ups 1.20x and 1.17x against the published 1.60x and 1.61x (-25%, -27%): the verify of k + 1
    tokens at 65K context is priced at 1.64x a decode step (MLA attention compute-bound at 3 query rows, more experts
    touched) and the host time is paid per iteration, where the engine's iteration took 1.36x its step."""
    for spec in ((2, 2.18), (3, 2.44)):
        modelled = lmsys_rate[spec] / lmsys_rate[None]
        published = LMSYS_PER_RANK[spec] / LMSYS_PER_RANK[None]
        assert modelled / published - 1 == pytest.approx({2: -0.250, 3: -0.272}[spec[0]], abs=0.01)


def test_pr4716_llama33_70b_eagle3():
    """The baseline is within the issue's 15% (+13%); with EAGLE-3 as run (8 draft passes at top-k 8, 64 tree nodes
    verified) and PR #12128's host time the per-user rate is +34.0%, outside the issue's 15% (the speed-up 3.14x
    against 2.65x); with the LMSYS blog's 6.10 ms borrowed instead it was +9.7% (docs/speculative.md)."""
    rate = {spec: per_user_rate(pr4716_scenario(spec)) for spec in PR4716_TOK_S}
    error = rate[(8, 5.88)] / PR4716_TOK_S[(8, 5.88)] - 1
    assert rate[None] / PR4716_TOK_S[None] - 1 == pytest.approx(0.131, abs=0.01)
    assert error == pytest.approx(0.340, abs=0.01)
    assert error > 0.15
    published_speedup = PR4716_TOK_S[(8, 5.88)] / PR4716_TOK_S[None]
    assert rate[(8, 5.88)] / rate[None] / published_speedup - 1 == pytest.approx(0.185, abs=0.01)
    borrowed = per_user_rate(pr4716_scenario((8, 5.88), LMSYS_HOST_STEP_S))
    assert borrowed / PR4716_TOK_S[(8, 5.88)] - 1 == pytest.approx(0.0975, abs=0.01)


def test_rows_for_validate_are_the_pinned_ones():
    """`simulator validate speculative` prints these rows: the same scenarios as the tests above (seven rates: two
    per setup and the LMSYS blog's second window), none of the four speculative rows within the issue's 15%."""
    rows = speculative_rows()
    assert len(rows) == 7
    by = {(r.source.split(" (")[0], r.spec): r.error for r in rows}
    assert by[("sglang PR #4716", (8, 5.88))] == pytest.approx(0.340, abs=0.01)
    assert by[("sglang PR #4716", None)] == pytest.approx(0.131, abs=0.01)
    assert by[("LMSYS MTP blog case 1", (2, 2.18))] == pytest.approx(0.302, abs=0.01)
    assert by[("sglang PR #3582", PR3582_SPEC)] == pytest.approx(1.846, abs=0.01)
    assert not any(abs(r.error) <= TOLERANCE for r in rows if r.spec is not None)
