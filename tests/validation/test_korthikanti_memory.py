"""Korthikanti et al. 2023, Figures 1 and 7: per-GPU params+optimizer and activation memory of the 22B, 175B,
530B and 1T models (Table 5 configurations) within 10 %. Run ``pytest -s`` to see the error table."""

from pathlib import Path

from simulator.memory import korthikanti_validation_rows, render_validation_table
from simulator.memory.validation import TOLERANCE
from simulator.validation import VALIDATION_DATA

DATA = VALIDATION_DATA


def test_memory_figures_within_ten_percent():
    rows = korthikanti_validation_rows(DATA / "korthikanti_2023_table5.csv",
                                       DATA / "korthikanti_2023_memory_figures.csv")
    print()
    print(render_validation_table(rows))
    assert len(rows) == 4 * 7
    bad = [r for r in rows if abs(r["error"]) > TOLERANCE]
    assert not bad, bad


def test_packaged_reference_data_is_the_tested_copy():
    import simulator.memory
    pkg = Path(simulator.memory.__file__).parent / "data"
    for name in ("korthikanti_2023_table5.csv", "korthikanti_2023_memory_figures.csv"):
        assert (pkg / name).read_text() == (DATA / name).read_text()
