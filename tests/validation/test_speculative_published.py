"""Speculative decoding against a published engine measurement (docs/speculative.md, "Validation").

sgl-project/sglang PR #3582 (NextN / MTP speculative decoding for DeepSeek-V3/R1, description of 2025-02-14):
DeepSeek-V3 on 8 x H200 at TP 8, batch 1, ``--speculative-num-steps 2 --speculative-eagle-topk 4
--speculative-num-draft-tokens 4``: "77 token/s output throughput on batch size 1", a 1.76x speed-up, average accept
length 2.5-3. Modelled as MTP with k = 3 (4 tokens verified) and E = 2.75 (the middle of the range), TP MoE as
SGLang ran it then (``etp: 8``), fp8 weights, a 1024-token prompt.
"""

import pytest

from simulator.entries.serve import simulate_serving
from simulator.scenario import load_scenario

PUBLISHED_TOK_S, PUBLISHED_SPEEDUP = 77.0, 1.76


def _scenario(speculative: bool) -> dict:
    serving = {"batch": 1, "input_len": 1024, "output_len": 256}
    if speculative:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": 3, "acceptance_length": 2.75}
    return {"name": "sglang-pr3582", "system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
            "parallel": {"tp": 8, "etp": 8}, "training": {"mode": "inference", "precision": "fp8"},
            "serving": serving}


@pytest.fixture(scope="module")
def tpot():
    return {spec: simulate_serving(load_scenario(_scenario(spec))).tpot_s for spec in (False, True)}


def test_speedup_within_15_percent_of_the_published(tpot):
    speedup = tpot[False] / tpot[True]
    assert speedup == pytest.approx(1.75, abs=0.01)   # 1.73 before TP ranks' shared tokens counted once
    assert abs(speedup / PUBLISHED_SPEEDUP - 1) < 0.15


def test_per_user_rate_misses_by_the_baseline_factor(tpot):
    """The per-user rate is 3.1x the published because the model's baseline is (7.2 ms per token against the
    engine's 22.9 ms): the issue's 15% on this row is not met (docs/speculative.md)."""
    assert 1 / tpot[True] / PUBLISHED_TOK_S == pytest.approx(3.14, abs=0.02)
    baseline = PUBLISHED_TOK_S / PUBLISHED_SPEEDUP
    assert 1 / tpot[False] / baseline == pytest.approx(3.16, abs=0.02)
