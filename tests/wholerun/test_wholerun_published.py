"""The whole-run model against published large-cluster figures (not the sources issue 28 keeps back).

Each row: the published figure, its source, and the tolerance of issue 31 (15%).
"""

from __future__ import annotations

import pytest

from simulator.hardware import load_cluster
from simulator.scenario.run_section import FailureSection
from simulator.wholerun.failures import component_counts, failure_rate_per_s

TOLERANCE = 0.15
HOUR = 3600.0

#: (GPUs, published MTTF in hours): Kokolis et al. 2024 (arXiv 2410.21680, HPCA 2025), Section V, the MTTF
#: projected from RSC-1's failure rate for jobs of 16,384 and 131,072 GPUs
KOKOLIS_MTTF_H = [(16384, 1.8), (131072, 0.23)]


@pytest.mark.parametrize(("gpus", "published_h"), KOKOLIS_MTTF_H)
def test_job_mttf_from_component_counts_matches_kokolis(gpus, published_h):
    cluster = load_cluster("dgx_a100_80gb", gpus // 8)   # RSC-1: 8 A100 per node
    rate = failure_rate_per_s(component_counts(cluster, gpus), FailureSection())
    predicted_h = 1 / rate / HOUR
    # 16,384 GPUs: 2048 nodes x 6.50e-3 per node-day = 13.31 per day: 1.80 h
    assert predicted_h == pytest.approx(published_h, rel=TOLERANCE)
