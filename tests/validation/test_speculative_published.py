"""Speculative decoding against published engine measurements (docs/speculative.md, "Validation").

sgl-project/sglang PR #3582 (NextN / MTP speculative decoding for DeepSeek-V3/R1, description of 2025-02-14):
DeepSeek-V3 on 8 x H200 at TP 8, batch 1, ``--speculative-num-steps 2 --speculative-eagle-topk 4
--speculative-num-draft-tokens 4``: "77 token/s output throughput on batch size 1", a 1.76x speed-up, average accept
length 2.5-3. Modelled as SGLang ran it (``framework: sglang``): MTP with k = 2 draft passes, top-k 4, 4 tree nodes
verified per sequence, E = 2.75 (the middle of the range), the draft's first pass issued eagerly (before SGLang PR
#6606), TP MoE (``etp: 8``), fp8 weights, a 1024-token prompt; the engine's host time per step from the LMSYS blog
below (``LMSYS_HOST_STEP_S``: a source other than this row).

LMSYS blog "Accelerating SGLang with Multiple Token Prediction" (2025-07-17, lm-sys/lm-sys.github.io
blog/2025-07-17-mtp.md, case study 1) with its launch command in sgl-project/sglang#7998: DeepSeek-V3-0324 decode on
two H200 nodes (16 GPUs: ``--tp-size 16 --dp-size 16 --enable-dp-attention --moe-dense-tp-size 1
--enable-dp-lm-head``, DeepEP low-latency, 32 redundant experts), 2 requests per rank of 65,536 + 4,096 tokens.
Output tokens/s per rank: 51.0 without MTP (and without the overlap scheduler, as the MTP runs), 81.5 with a 3-token
window (``--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3``: k = 2), average
acceptance length 2.18, and 82.0 with a 4-token window (k = 3), 2.44. Per user: the per-rank rate over 2 requests.
Its overlap-scheduler gain (51.0 -> 60.4 tok/s per rank, the same setup) is the host time SGLang's overlap hides:
2 / 51.0 - 2 / 60.4 = 6.10 ms per step (``LMSYS_HOST_STEP_S``), which prices the engine's host time per iteration
of the two PR rows (SGLang turns the overlap off under speculative decoding); this row itself is scored without it
(no source other than the row gives SGLang's host time here).

sgl-project/sglang PR #4716 (2025-03-24, comment by ispobock): Llama-3.3-70B-Instruct on H100 at TP 8, fp16, one
request at a time (``--cuda-graph-max-bs 1``; benchmark/mtbench/bench_sglang_eagle.py, 80 MT-bench questions): 88.61
tok/s without speculation; EAGLE-3 ``--speculative-num-steps 8 --speculative-eagle-topk 8
--speculative-num-draft-tokens 64``: 234.54 tok/s, acceptance length 5.88. Modelled as run: k = 8 draft passes,
top-k 8, 64 tree nodes verified per sequence, the draft's first pass eager (before PR #6606), the host time per
iteration from the LMSYS blog (``LMSYS_HOST_STEP_S``), 512 + 512 tokens (the rate barely moves with the length at
batch 1).
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
#: SGLang's host time per step that its overlap scheduler hides: LMSYS MTP blog, case 1, 2 requests per rank at
#: 51.0 tok/s per rank without the overlap scheduler and 60.4 with it (s)
LMSYS_HOST_STEP_S = 2 / 51.0 - 2 / 60.4


def _scenario(speculative: bool) -> dict:
    serving = {"batch": 1, "input_len": 1024, "output_len": 256, "host": {"step_s": LMSYS_HOST_STEP_S}}
    if speculative:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": 2, "topk": 4, "num_draft_tokens": 4,
                                  "acceptance_length": 2.75, "draft_extend_graph": False}
    return {"name": "sglang-pr3582", "system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
            "parallel": {"tp": 8, "etp": 8}, "training": {"mode": "inference", "precision": "fp8",
                                                          "framework": "sglang"}, "serving": serving}


def _lmsys_scenario(spec: tuple[int, float] | None) -> dict:
    serving = {"batch": LMSYS_REQUESTS_PER_RANK, "input_len": 65536, "output_len": 4096, "expert_kernel": "deepgemm",
               "all2all_backend": "deepep_low_latency"}
    if spec is not None:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": spec[0], "acceptance_length": spec[1]}
    return {"name": "lmsys-mtp-case1", "system": {"profile": "hgx_h200", "nodes": 2, "net_issue": "ibgda"},
            "model": {"preset": "deepseek-v3"}, "parallel": {"tp": 1, "ep": 16, "redundant_experts": 32},
            "training": {"mode": "inference", "precision": "fp8", "framework": "sglang"}, "serving": serving}


def _pr4716_scenario(spec: tuple[int, float] | None) -> dict:
    serving = {"batch": 1, "input_len": 512, "output_len": 512, "host": {"step_s": LMSYS_HOST_STEP_S}}
    if spec is not None:
        serving["speculative"] = {"method": "eagle3", "num_speculative_tokens": spec[0], "topk": 8,
                                  "num_draft_tokens": 64, "acceptance_length": spec[1], "draft_extend_graph": False}
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


def test_pr3582_per_user_rate_misses_by_the_baseline_factor(tpot):
    """Pinned at the honest errors (docs/speculative.md): the modelled baseline step is 6.2 ms against the engine's
    22.9 ms (3.67x its rate); with MTP the iteration is 0.67 ms of draft, 9.91 ms of verify (4 tree nodes) and
    6.10 ms of host time (the LMSYS blog's, SGLang's overlap off), so the per-user rate is +114% and the speed-up
    1.03x against 1.76x: the host time sits on a GPU iteration 3.7x shorter than the engine's."""
    baseline = PUBLISHED_TOK_S / PUBLISHED_SPEEDUP
    assert 1 / tpot[False] / baseline == pytest.approx(3.672, abs=0.01)
    assert 1 / tpot[True] / PUBLISHED_TOK_S - 1 == pytest.approx(1.140, abs=0.01)   # +214% as a chain of k = 3
    assert tpot[False] / tpot[True] == pytest.approx(1.026, abs=0.01)


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
    """The baseline is within the issue's 15% (+13%); with EAGLE-3 as run (8 draft passes at top-k 8, 64 tree nodes
    verified) the iteration is 1.76 ms of draft + 14.96 ms of verify + 6.10 ms of host time (the LMSYS blog's) =
    22.83 ms against the engine's 5.88 / 234.54 = 25.07 ms: the per-user rate is +9.7%, within the issue's 15%
    (+83% as a chain of k = 8 without host time), the speed-up 2.57x against 2.65x (docs/speculative.md)."""
    rate = {spec: 1 / simulate_serving(load_scenario(_pr4716_scenario(spec))).tpot_s for spec in PR4716_TOK_S}
    assert rate[None] / PR4716_TOK_S[None] - 1 == pytest.approx(0.131, abs=0.01)
    assert rate[(8, 5.88)] / PR4716_TOK_S[(8, 5.88)] - 1 == pytest.approx(0.0975, abs=0.01)
    assert abs(rate[(8, 5.88)] / PR4716_TOK_S[(8, 5.88)] - 1) < 0.15
    published_speedup = PR4716_TOK_S[(8, 5.88)] / PR4716_TOK_S[None]
    assert rate[(8, 5.88)] / rate[None] / published_speedup - 1 == pytest.approx(-0.030, abs=0.01)
