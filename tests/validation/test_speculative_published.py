"""Speculative decoding against published engine measurements (docs/speculative.md, "Validation").

sgl-project/sglang PR #3582 (NextN / MTP speculative decoding for DeepSeek-V3/R1, description of 2025-02-14):
DeepSeek-V3 on 8 x H200 at TP 8, batch 1, ``--speculative-num-steps 2 --speculative-eagle-topk 4
--speculative-num-draft-tokens 4``: "77 token/s output throughput on batch size 1", a 1.76x speed-up, average accept
length 2.5-3. Modelled as MTP with k = 3 (4 tokens verified) and E = 2.75 (the middle of the range), TP MoE as
SGLang ran it then (``etp: 8``), fp8 weights, a 1024-token prompt.

LMSYS blog "Accelerating SGLang with Multiple Token Prediction" (2025-07-17, lm-sys/lm-sys.github.io
blog/2025-07-17-mtp.md, case study 1) with its launch command in sgl-project/sglang#7998: DeepSeek-V3-0324 decode on
two H200 nodes (16 GPUs: ``--tp-size 16 --dp-size 16 --enable-dp-attention --moe-dense-tp-size 1
--enable-dp-lm-head``, DeepEP low-latency, 32 redundant experts), 2 requests per rank of 65,536 + 4,096 tokens.
Output tokens/s per rank: 51.0 without MTP (and without the overlap scheduler, as the MTP runs), 81.5 with a 3-token
window (``--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3``: k = 2), average
acceptance length 2.18, and 82.0 with a 4-token window (k = 3), 2.44. Per user: the per-rank rate over 2 requests.

sgl-project/sglang PR #4716 (2025-03-24, comment by ispobock): Llama-3.3-70B-Instruct on H100 at TP 8, fp16, one
request at a time (``--cuda-graph-max-bs 1``; benchmark/mtbench/bench_sglang_eagle.py, 80 MT-bench questions): 88.61
tok/s without speculation; EAGLE-3 ``--speculative-num-steps 8 --speculative-eagle-topk 8
--speculative-num-draft-tokens 64``: 234.54 tok/s, acceptance length 5.88. Modelled as a chain of k = 8 (the tree of
64 verified tokens is not modelled), 512 + 512 tokens (the rate barely moves with the length at batch 1).
"""

import pytest

from simulator.entries.serve import simulate_serving
from simulator.scenario import load_scenario

PUBLISHED_TOK_S, PUBLISHED_SPEEDUP = 77.0, 1.76
#: LMSYS MTP blog, case 1: (k, acceptance length) -> output tok/s per rank; None: without MTP
LMSYS_PER_RANK = {None: 51.0, (2, 2.18): 81.5, (3, 2.44): 82.0}
LMSYS_REQUESTS_PER_RANK = 2
#: SGLang PR #4716: output tok/s at batch 1 without speculation and with EAGLE-3 (k = 8, E = 5.88)
PR4716_TOK_S = {None: 88.61, (8, 5.88): 234.54}


def _scenario(speculative: bool) -> dict:
    serving = {"batch": 1, "input_len": 1024, "output_len": 256}
    if speculative:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": 3, "acceptance_length": 2.75}
    return {"name": "sglang-pr3582", "system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
            "parallel": {"tp": 8, "etp": 8}, "training": {"mode": "inference", "precision": "fp8"},
            "serving": serving}


def _lmsys_scenario(spec: tuple[int, float] | None) -> dict:
    serving = {"batch": LMSYS_REQUESTS_PER_RANK, "input_len": 65536, "output_len": 4096, "expert_kernel": "deepgemm",
               "all2all_backend": "deepep_low_latency"}
    if spec is not None:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": spec[0], "acceptance_length": spec[1]}
    return {"name": "lmsys-mtp-case1", "system": {"profile": "hgx_h200", "nodes": 2, "net_issue": "ibgda"},
            "model": {"preset": "deepseek-v3"}, "parallel": {"tp": 1, "ep": 16, "redundant_experts": 32},
            "training": {"mode": "inference", "precision": "fp8", "framework": "sglang"}, "serving": serving}


def _pr4716_scenario(spec: tuple[int, float] | None) -> dict:
    serving = {"batch": 1, "input_len": 512, "output_len": 512}
    if spec is not None:
        serving["speculative"] = {"method": "eagle3", "num_speculative_tokens": spec[0], "acceptance_length": spec[1]}
    return {"name": "sglang-pr4716", "system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-70b"},
            "parallel": {"tp": 8}, "training": {"mode": "inference", "precision": "bf16", "framework": "sglang"},
            "serving": serving}


@pytest.fixture(scope="module")
def tpot():
    return {spec: simulate_serving(load_scenario(_scenario(spec))).tpot_s for spec in (False, True)}


@pytest.fixture(scope="module")
def lmsys_rate():
    """Modelled per-user rate (tok/s) of each LMSYS configuration."""
    return {spec: 1 / simulate_serving(load_scenario(_lmsys_scenario(spec))).tpot_s for spec in LMSYS_PER_RANK}


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


def test_lmsys_mtp_per_user_rates(lmsys_rate):
    """Pinned at the honest errors (docs/speculative.md): the baseline step is 22.6 ms modelled against the engine's
    39.2 ms (+74% per-user rate), with MTP +37% and +32%; none within the issue's 15%."""
    errors = {spec: lmsys_rate[spec] / (rank / LMSYS_REQUESTS_PER_RANK) - 1
              for spec, rank in LMSYS_PER_RANK.items()}
    assert errors[None] == pytest.approx(0.737, abs=0.01)
    assert errors[(2, 2.18)] == pytest.approx(0.373, abs=0.01)
    assert errors[(3, 2.44)] == pytest.approx(0.323, abs=0.01)
    # the speculative rows miss by less than the baseline: the engine's extra time per step is paid once per iteration
    assert errors[(2, 2.18)] < errors[None] and errors[(3, 2.44)] < errors[None]


def test_lmsys_mtp_speedups(lmsys_rate):
    """Modelled speed-ups 1.26x and 1.23x against the published 1.60x and 1.61x (-21%, -24%): the verify of k + 1
    tokens at 65K context is priced at 1.64x a decode step (MLA attention compute-bound at 3 query rows, more experts
    touched), where the engine's iteration took 1.36x its step."""
    for spec in ((2, 2.18), (3, 2.44)):
        modelled = lmsys_rate[spec] / lmsys_rate[None]
        published = LMSYS_PER_RANK[spec] / LMSYS_PER_RANK[None]
        assert modelled / published - 1 == pytest.approx({2: -0.211, 3: -0.238}[spec[0]], abs=0.01)


def test_pr4716_llama33_70b_eagle3():
    """The baseline is within the issue's 15% (+13%); with EAGLE-3 the per-user rate is +83% (the modelled iteration
    of 8 draft passes and a 9-token verify is 13.7 ms, 1.37x the modelled step; the engine's took 5.88 / 234.54 =
    25.1 ms, 2.2x its step), so the speed-up is 4.29x against the published 2.65x (docs/speculative.md)."""
    rate = {spec: 1 / simulate_serving(load_scenario(_pr4716_scenario(spec))).tpot_s for spec in PR4716_TOK_S}
    assert rate[None] / PR4716_TOK_S[None] - 1 == pytest.approx(0.131, abs=0.01)
    assert rate[(8, 5.88)] / PR4716_TOK_S[(8, 5.88)] - 1 == pytest.approx(0.832, abs=0.01)
    published_speedup = PR4716_TOK_S[(8, 5.88)] / PR4716_TOK_S[None]
    assert rate[(8, 5.88)] / rate[None] / published_speedup - 1 == pytest.approx(0.620, abs=0.01)
