"""Korthikanti et al. 2023, Figures 1 and 7: per-GPU params+optimizer and activation memory of the 22B, 175B,
530B and 1T models (Table 5 configurations) within 10 %. Run ``pytest -s`` to see the error table."""

from pathlib import Path

from simulator.validation import VALIDATION_DATA
from simulator.validation.korthikanti_memory import (
    TOLERANCE,
    korthikanti_validation_rows,
    render_validation_table,
)

DATA = VALIDATION_DATA


def test_memory_figures_within_ten_percent():
    rows = korthikanti_validation_rows(DATA / "korthikanti_2023_table5.csv",
                                       DATA / "korthikanti_2023_memory_figures.csv")
    print()
    print(render_validation_table(rows))
    assert len(rows) == 4 * 7
    bad = [r for r in rows if abs(r["error"]) > TOLERANCE]
    assert not bad, bad


def test_reference_data_has_one_copy_and_the_default_reads_it():
    root = Path(__file__).resolve().parents[2]
    copies = sorted(str(p.relative_to(root)) for p in (root / "simulator").rglob("korthikanti_2023_*.csv"))
    assert copies == ["simulator/validation/data/korthikanti_2023_memory_figures.csv",
                      "simulator/validation/data/korthikanti_2023_table4_layer.csv",
                      "simulator/validation/data/korthikanti_2023_table5.csv"]
    assert korthikanti_validation_rows() == korthikanti_validation_rows(DATA / "korthikanti_2023_table5.csv",
                                                                        DATA / "korthikanti_2023_memory_figures.csv")
