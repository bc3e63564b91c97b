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

#: (GPUs, published MTTF in hours): Kokolis et al. 2024 (arXiv 2410.21680, HPCA 2025), the text of Fig. 7, the MTTF
#: projected from RSC-1's failure rate for jobs of 16,384 and 131,072 GPUs
KOKOLIS_MTTF_H = [(16384, 1.8), (131072, 0.23)]


@pytest.mark.parametrize(("gpus", "published_h"), KOKOLIS_MTTF_H)
def test_job_mttf_from_component_counts_matches_kokolis(gpus, published_h):
    cluster = load_cluster("dgx_a100_80gb", gpus // 8)   # RSC-1: 8 A100 per node
    rate = failure_rate_per_s(component_counts(cluster, gpus), FailureSection())
    predicted_h = 1 / rate / HOUR
    # 16,384 GPUs: 2048 nodes x 6.50e-3 per node-day = 13.31 per day: 1.80 h
    assert predicted_h == pytest.approx(published_h, rel=TOLERANCE)


#: BLOOM-176B as BigScience trained it (bigscience-workshop/bigscience@9e64edec2ad1fb9263bf39ba616a84ff64b4d947
#: train/tr11-176B-ml/README.md, "Architecture", "Replica setup", "Checkpoints"): 70 layers of width 14336, 112
#: heads, a 250,880-row padded vocabulary tied with the output, ALiBi (no position table), biases, LayerNorm
BLOOM = {
    "name": "bloom-176b",
    "system": {"profile": "jean_zay_a100_80gb", "nodes": 48},
    "model": {"name": "bloom-176b", "layers": 70, "hidden": 14336, "heads": 112, "vocab": 250880,
              "activation": "gelu", "norm": "layernorm", "linear_bias": True, "tied_embeddings": True,
              "position_embedding": "none"},
    "parallel": {"tp": 4, "pp": 12, "dp": 8, "zero": 1, "recompute": "full",
                 "pipeline_layers": [5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5]},   # the README's partition
    "training": {"seq_len": 2048, "micro_batch": 2, "global_batch": 2048, "precision": "bf16"},
}


def test_bloom_checkpoint_size_matches_the_run_log():
    """The README's `du` of a saved step: 2.3T in all (bf16 + fp32 weights and fp32 Adam states: 14 B per
    parameter, its own breakdown) and 329G of bf16 weights; `du -h` prints binary units rounded up."""
    from simulator import load_scenario
    from simulator.wholerun.checkpoint import checkpoint_bytes

    rp = load_scenario(BLOOM).plan
    TIB, GIB = 2**40, 2**30
    total = checkpoint_bytes(rp)
    assert total / TIB == pytest.approx(2.3, rel=TOLERANCE)          # 2.244 TiB: within 2.5%
    assert total / 14 * 2 / GIB == pytest.approx(329, rel=TOLERANCE)  # 328.3 GiB of bf16 weights
