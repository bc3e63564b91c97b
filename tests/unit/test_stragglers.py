"""The expected slowest of N GPUs (simulator.schedule.stragglers)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.schedule.stragglers import expected_max_z, straggler_factor


def test_expected_maximum_of_normals_matches_tabulated_values():
    """E[max of N standard normals]: 1/sqrt(pi) = 0.5642 for 2, 1.4236 for 8 (tables of normal order statistics),
    3.8 to 3.9 for 10^4."""
    assert expected_max_z(1) == 0.0
    assert expected_max_z(2) == pytest.approx(0.5642, rel=1e-3)
    assert expected_max_z(8) == pytest.approx(1.4236, rel=1e-3)
    assert 3.8 < expected_max_z(10_000) < 3.9


def test_factor_is_relative_to_the_gpus_the_coefficients_were_fitted_on():
    assert straggler_factor(8, 0.015, calibration_gpus=8) == 1.0
    assert straggler_factor(256, 0.015) == pytest.approx(1 + 0.015 * expected_max_z(256))
    assert straggler_factor(4096, 0.0) == 1.0


@given(n=st.integers(1, 10**6), sigma=st.floats(0, 0.2))
def test_factor_grows_with_gpus(n, sigma):
    assert straggler_factor(n + 1, sigma) >= straggler_factor(n, sigma) >= 1.0
