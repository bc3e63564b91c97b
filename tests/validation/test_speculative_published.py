"""Speculative decoding against published engine measurements (docs/speculative.md, "Validation").

sgl-project/sglang PR #3582 (NextN / MTP speculative decoding for DeepSeek-V3/R1, description of 2025-02-14):
DeepSeek-V3 on 8 x H200 at TP 8, batch 1, ``--speculative-num-steps 2 --speculative-eagle-topk 4
--speculative-num-draft-tokens 4``: "77 token/s output throughput on batch size 1", a 1.76x speed-up, average accept
length 2.5-3. Modelled as SGLang ran it (``framework: sglang``): MTP with k = 2 draft passes, top-k 4, 4 tree nodes
verified per sequence, E = 2.75 (the middle of the range), the draft's first pass issued eagerly (before SGLang PR
#6606), TP MoE (``etp: 8``), fp8 weights, a 1024-token prompt.

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
--speculative-num-draft-tokens 64``: 234.54 tok/s, acceptance length 5.88. Modelled as run: k = 8 draft passes,
top-k 8, 64 tree nodes verified per sequence, the draft's first pass eager (before PR #6606), 512 + 512 tokens (the
rate barely moves with the length at batch 1).

Host time (every row: SGLang turns its overlap scheduler off under speculative decoding, so the engine's host work is
paid once per draft-and-verify iteration): ``SPEC_HOST_ITERATION_S`` from sgl-project/sglang PR #12128 (2025-10-25), a
source other than every row: DeepSeek-R1 at TP 8 on one Hopper node, ``--speculative-algorithm EAGLE`` with SGLang's
DeepSeek default of 3 steps x top-k 1 x 4 draft tokens (server_args.py ``auto_choose_speculative_params``), one request
of 512 output tokens (``sglang.test.send_one``), acceptance length 2.296: 140.52 tok/s on the speculative worker
without overlap, 159.71 with the beta overlap (``--enable-beta-spec``), so the overlap hides
2.296 x (1 / 140.52 - 1 / 159.71) = 1.96 ms per iteration: a lower bound on the host time it serialises (the PR notes
the overlap is not yet complete). The earlier reading, ``LMSYS_HOST_STEP_S`` (6.10 ms), is the LMSYS blog's
overlap-scheduler gain on a non-speculative DP-attention deployment (51.0 -> 60.4 tok/s per rank at 2 requests per
rank): kept as a sensitivity, in-sample for the LMSYS row.
"""

import pytest

from simulator.entries.serve import serving_context, simulate_serving
from simulator.scenario import load_scenario
from simulator.serving.speculative import iteration

PUBLISHED_TOK_S, PUBLISHED_SPEEDUP = 77.0, 1.76
#: LMSYS MTP blog, case 1: (k, acceptance length) -> output tok/s per rank; None: without MTP
LMSYS_PER_RANK = {None: 51.0, (2, 2.18): 81.5, (3, 2.44): 82.0}
LMSYS_REQUESTS_PER_RANK = 2
#: SGLang PR #4716: output tok/s at batch 1 without speculation and with EAGLE-3 (k = 8, E = 5.88)
PR4716_TOK_S = {None: 88.61, (8, 5.88): 234.54}
#: SGLang's host time per speculative iteration that its overlap hides (s): PR #12128, DeepSeek-R1 TP 8, batch 1,
#: acceptance length 2.296, 140.52 tok/s without the overlap and 159.71 with it (module docstring)
SPEC_HOST_ITERATION_S = 2.296 * (1 / 140.52 - 1 / 159.71)
#: the earlier reading: SGLang's host time per step that its overlap scheduler hides in the LMSYS MTP blog's case 1,
#: 2 requests per rank at 51.0 tok/s per rank without the overlap scheduler and 60.4 with it (s)
LMSYS_HOST_STEP_S = 2 / 51.0 - 2 / 60.4


def _scenario(speculative: bool, host: float = SPEC_HOST_ITERATION_S) -> dict:
    serving = {"batch": 1, "input_len": 1024, "output_len": 256, "host": {"step_s": host}}
    if speculative:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": 2, "topk": 4, "num_draft_tokens": 4,
                                  "acceptance_length": 2.75, "draft_extend_graph": False}
    return {"name": "sglang-pr3582", "system": {"profile": "hgx_h200", "nodes": 1}, "model": {"preset": "deepseek-v3"},
            "parallel": {"tp": 8, "etp": 8}, "training": {"mode": "inference", "precision": "fp8",
                                                          "framework": "sglang"}, "serving": serving}


def _lmsys_scenario(spec: tuple[int, float] | None, host: float = SPEC_HOST_ITERATION_S) -> dict:
    serving = {"batch": LMSYS_REQUESTS_PER_RANK, "input_len": 65536, "output_len": 4096, "expert_kernel": "deepgemm",
               "all2all_backend": "deepep_low_latency", "host": {"step_s": host}}
    if spec is not None:
        serving["speculative"] = {"method": "mtp", "num_speculative_tokens": spec[0], "acceptance_length": spec[1]}
    return {"name": "lmsys-mtp-case1", "system": {"profile": "hgx_h200", "nodes": 2, "net_issue": "ibgda"},
            "model": {"preset": "deepseek-v3"}, "parallel": {"tp": 1, "ep": 16, "redundant_experts": 32},
            "training": {"mode": "inference", "precision": "fp8", "framework": "sglang"}, "serving": serving}


def _pr4716_scenario(spec: tuple[int, float] | None, host: float = SPEC_HOST_ITERATION_S) -> dict:
    serving = {"batch": 1, "input_len": 512, "output_len": 512, "host": {"step_s": host}}
    if spec is not None:
        serving["speculative"] = {"method": "eagle3", "num_speculative_tokens": spec[0], "topk": 8,
                                  "num_draft_tokens": 64, "acceptance_length": spec[1], "draft_extend_graph": False}
    return {"name": "sglang-pr4716", "system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-70b"},
            "parallel": {"tp": 8}, "training": {"mode": "inference", "precision": "bf16", "framework": "sglang"},
            "serving": serving}


def _rate(scenario: dict) -> float:
    """Modelled per-user rate (tok/s)."""
    return 1 / simulate_serving(load_scenario(scenario)).tpot_s


def _iteration(scenario: dict) -> dict:
    sc = load_scenario(scenario)
    ctx, _ = serving_context(sc)
    return iteration(ctx, sc.plan, sc.serving.batch, sc.serving.input_len).to_dict()


@pytest.fixture(scope="module")
def tpot():
    return {spec: simulate_serving(load_scenario(_scenario(spec))).tpot_s for spec in (False, True)}


@pytest.fixture(scope="module")
def lmsys_rate():
    """Modelled per-user rate (tok/s) of each LMSYS configuration."""
    return {spec: _rate(_lmsys_scenario(spec)) for spec in LMSYS_PER_RANK}


def test_host_time_is_paid_once_per_iteration():
    """The PR #12128 host time (2.296 x (1/140.52 - 1/159.71) = 1.963 ms) enters the PR #4716 iteration whole, after
    the GPU work (the ``sglang`` profile's ``speculative_overlap: false``): draft 1.763 + verify 14.959 + host 1.963 =
    18.686 ms, against the engine's 5.88 / 234.54 = 25.07 ms (6.4 ms not priced)."""
    assert SPEC_HOST_ITERATION_S == pytest.approx(1.963e-3, abs=1e-6)
    it = _iteration(_pr4716_scenario((8, 5.88)))
    assert it["host_s"] == pytest.approx(SPEC_HOST_ITERATION_S, rel=1e-9)
    assert (it["draft_s"], it["verify_s"]) == pytest.approx((1.763e-3, 14.959e-3), abs=2e-6)
    assert it["iteration_s"] == pytest.approx(18.686e-3, abs=2e-6)


def test_pr3582_per_user_rate_misses_by_the_baseline_factor(tpot):
    """Pinned at the honest errors (docs/speculative.md): the modelled baseline step is 6.2 ms against the engine's
    22.9 ms (3.67x its rate); with MTP the iteration is 0.67 ms of draft, 9.91 ms of verify (4 tree nodes) and 1.96 ms
    of host time (PR #12128), so the per-user rate is +185% (+114% with the LMSYS 6.10 ms) and the speed-up 1.36x
    against 1.76x."""
    baseline = PUBLISHED_TOK_S / PUBLISHED_SPEEDUP
    assert 1 / tpot[False] / baseline == pytest.approx(3.672, abs=0.01)
    assert 1 / tpot[True] / PUBLISHED_TOK_S - 1 == pytest.approx(1.846, abs=0.01)
    assert tpot[False] / tpot[True] == pytest.approx(1.364, abs=0.01)
    assert _rate(_scenario(True, LMSYS_HOST_STEP_S)) / PUBLISHED_TOK_S - 1 == pytest.approx(1.140, abs=0.01)


def test_lmsys_mtp_per_user_rates(lmsys_rate):
    """Pinned at the honest errors (docs/speculative.md): the baseline step is 22.6 ms modelled against the engine's
    39.2 ms (+74% per-user rate), with MTP and the PR #12128 host time +30% and +26% (+37% / +32% without host time);
    none within the issue's 15%."""
    errors = {spec: lmsys_rate[spec] / (rank / LMSYS_REQUESTS_PER_RANK) - 1
              for spec, rank in LMSYS_PER_RANK.items()}
    assert errors[None] == pytest.approx(0.736, abs=0.01)
    assert errors[(2, 2.18)] == pytest.approx(0.302, abs=0.01)
    assert errors[(3, 2.44)] == pytest.approx(0.264, abs=0.01)
    # the speculative rows miss by less than the baseline: the engine's extra time per step is paid once per iteration
    assert errors[(2, 2.18)] < errors[None] and errors[(3, 2.44)] < errors[None]
    assert min(errors.values()) > 0.15


def test_lmsys_mtp_speedups(lmsys_rate):
    """Modelled speed-ups 1.20x and 1.17x against the published 1.60x and 1.61x (-25%, -27%): the verify of k + 1
    tokens at 65K context is priced at 1.64x a decode step (MLA attention compute-bound at 3 query rows, more experts
    touched) and the host time is paid per iteration, where the engine's iteration took 1.36x its step."""
    for spec in ((2, 2.18), (3, 2.44)):
        modelled = lmsys_rate[spec] / lmsys_rate[None]
        published = LMSYS_PER_RANK[spec] / LMSYS_PER_RANK[None]
        assert modelled / published - 1 == pytest.approx({2: -0.250, 3: -0.272}[spec[0]], abs=0.01)


def test_pr4716_llama33_70b_eagle3():
    """The baseline is within the issue's 15% (+13%); with EAGLE-3 as run (8 draft passes at top-k 8, 64 tree nodes
    verified) and PR #12128's host time the per-user rate is +34.0%, outside the issue's 15% (the speed-up 3.14x
    against 2.65x); with the LMSYS blog's 6.10 ms borrowed instead it was +9.7% (docs/speculative.md)."""
    rate = {spec: _rate(_pr4716_scenario(spec)) for spec in PR4716_TOK_S}
    error = rate[(8, 5.88)] / PR4716_TOK_S[(8, 5.88)] - 1
    assert rate[None] / PR4716_TOK_S[None] - 1 == pytest.approx(0.131, abs=0.01)
    assert error == pytest.approx(0.340, abs=0.01)
    assert error > 0.15
    published_speedup = PR4716_TOK_S[(8, 5.88)] / PR4716_TOK_S[None]
    assert rate[(8, 5.88)] / rate[None] / published_speedup - 1 == pytest.approx(0.185, abs=0.01)
    borrowed = _rate(_pr4716_scenario((8, 5.88), LMSYS_HOST_STEP_S))
    assert borrowed / PR4716_TOK_S[(8, 5.88)] - 1 == pytest.approx(0.0975, abs=0.01)
