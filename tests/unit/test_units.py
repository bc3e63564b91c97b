"""Unit parsing at the edges: docs/interface.md's conventions (GB = 1e9 B, GiB = 2**30 B, Gb = 1e9 bits)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.units import GiB, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("600 GB/s", "bandwidth", 600e9),
        ("200 Gb/s", "bandwidth", 25e9),
        ("400Gb/s", "bandwidth", 50e9),
        ("80 GiB", "bytes", 80 * 2**30),
        ("141 GB", "bytes", 141e9),
        ("4 MiB", "bytes", 4 * 2**20),
        ("1.5 us", "time", 1.5e-6),
        ("130 ns", "time", 130e-9),
        ("1830 MHz", "frequency", 1.83e9),
        ("989.4 TFLOP/s", "flops", 989.4e12),
        ("1.5e3 MB/s", "bandwidth", 1.5e9),
    ],
)
def test_parses_contract_examples(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected, rel=1e-12)


def test_bare_number_takes_the_documented_unit():
    assert parse_quantity(25, "bandwidth", default_unit="GB/s") == 25e9
    assert parse_quantity(2.5, "time") == 2.5


@pytest.mark.parametrize(
    ("text", "dimension", "fragment"),
    [
        ("80 GB/s", "bytes", "that is a bandwidth unit"),
        ("fast", "bandwidth", "cannot parse"),
        ("12 parsecs", "time", "unknown time unit 'parsecs'"),
        (True, "bytes", "boolean"),
        ("nan GB", "bytes", "cannot parse"),
    ],
)
def test_rejects_with_a_message_naming_the_problem(text, dimension, fragment):
    with pytest.raises(UserError, match=fragment):
        parse_quantity(text, dimension)


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False))
def test_format_then_parse_round_trips(value):
    text = format_quantity(value * GiB, "bytes", "GiB")
    assert parse_quantity(text, "bytes") == pytest.approx(value * GiB, rel=1e-5)


def test_user_error_locates_itself():
    err = UserError("must be positive", key_path="bandwidth").located(file="x.yaml", key_prefix="gpu.nvlink", line=7)
    assert str(err) == "x.yaml:7: gpu.nvlink.bandwidth: must be positive"
