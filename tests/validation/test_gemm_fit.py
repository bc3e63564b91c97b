"""The GEMM efficiency model fitted to the 132 GEMMs measured on H200 (simulator/validation/data/h200x2_kit/gemm.csv)
reproduces them: bf16/fp16 (the training dtypes) within 5 % mean and 15 % max relative time error. The shipped
``hopper`` table is that fit. Run ``pytest -s`` to see the error table."""


import numpy as np

from simulator.compute import (
    default_efficiency,
    fit_errors,
    fit_gemm_efficiency,
    format_fit_table,
    read_gemm_csv,
)
from simulator.hardware import load_gpu
from simulator.validation import VALIDATION_DATA

DATA = VALIDATION_DATA / "h200x2_kit" / "gemm.csv"
MEAN_TOL, MAX_TOL = 0.05, 0.15


def _check(rows, gpu, eff):
    err = fit_errors(rows, gpu, eff)
    train = np.abs(np.array([e for e, r in zip(err, rows, strict=True) if r.dtype in ("bf16", "fp16")]))
    assert train.mean() <= MEAN_TOL, train.mean()
    assert train.max() <= MAX_TOL, train.max()


def test_fit_reproduces_measured_h200_gemms():
    rows, gpu = read_gemm_csv(DATA), load_gpu("h200_sxm")
    fitted = fit_gemm_efficiency(rows, gpu, default_efficiency("hopper"), source="test fit")
    print()
    print(format_fit_table(rows, gpu, fitted))
    _check(rows, gpu, fitted)


def test_shipped_hopper_table_reproduces_measured_gemms():
    rows, gpu = read_gemm_csv(DATA), load_gpu("h200_sxm")
    _check(rows, gpu, default_efficiency("hopper"))


def test_efficiency_falls_for_skinny_and_small_gemms():
    from simulator.compute import gemm_efficiency
    eff = default_efficiency("hopper")
    big, skinny, tiny = gemm_efficiency([8192, 64, 1], [8192, 4096, 8192], [8192, 4096, 8192], 1, 132, eff, "bf16")
    assert big > skinny > tiny
