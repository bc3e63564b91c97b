"""`calibrate --trace` on the four Kineto traces recorded on one H200 (simulator/validation/data/h200_traces/: one
HF Transformers 5.17 training step each, torch 2.11, bf16 parameters, fused AdamW, sdpa, recorded by
the device campaign's hf_train.py with record_shapes=True; the harness wraps each phase in a ``phase:<name>`` range
ending in torch.cuda.synchronize). What the reader derives is checked against what the trace itself says by an
independent route, and against the models' published dimensions."""

import pytest

from simulator.implementation.kineto import read_trace
from simulator.implementation.trace_stats import trace_stats
from simulator.validation import VALIDATION_DATA
from simulator.validation.trace_calibration import build_profile
from simulator.validation.trace_round_trip import ProfilesMissing, gpu_round_trip, trace_round_trip

TRACES = VALIDATION_DATA / "h200_traces"
#: published dimensions (HF config.json of Qwen/Qwen2.5-0.5B and meta-llama/Llama-3.2-1B, as written in
#: the device campaign's hf_common.py): layers, hidden, heads, kv heads, head dim, SwiGLU width, vocabulary
MODELS = {"qwen2.5-0.5b": (24, 896, 14, 2, 64, 4864, 151936), "llama-3.2-1b": (16, 2048, 32, 8, 64, 8192, 128256)}
CASES = [(m, mb, s) for m in MODELS for mb, s in ((4, 1024), (8, 2048))]
#: measured step time (median of CUDA-event-timed steps, unprofiled) of the same runs: h15's
#: the device campaign's h200_hf/train.jsonl, case train, checkpointing off, step_s_median
MEASURED_STEP_S = {("qwen2.5-0.5b", 4, 1024): 0.08339, ("qwen2.5-0.5b", 8, 2048): 0.19189,
                   ("llama-3.2-1b", 4, 1024): 0.08846, ("llama-3.2-1b", 8, 2048): 0.32112}


def _path(model, mb, seq):
    return TRACES / f"{model}_mb{mb}_s{seq}.json.gz"


@pytest.fixture(scope="module")
def traces():
    return {case: read_trace(_path(*case)) for case in CASES}


@pytest.fixture(scope="module")
def stats(traces):
    return {case: trace_stats(t) for case, t in traces.items()}


def _by_harness_ranges(trace):
    """Kernels per phase by the harness's own ``phase:<name>`` ranges (the launch call's start inside the range):
    a second classification that does not use the autograd operators."""
    ranges = [(a.name[6:], a.start_s, a.end_s) for a in trace.annotations if a.name.startswith("phase:")]
    launched = {r.correlation: r.start_s for r in trace.runtime}
    counts = {}
    for k in trace.kernels:
        t = launched[k.correlation]
        name = next(n for n, a, b in ranges if a <= t <= b)
        counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize("case", CASES)
def test_phase_kernels_agree_with_the_harness_ranges(traces, stats, case):
    """Every kernel is in one phase; the autograd-based split differs from the harness ranges by the one kernel
    loss.backward() launches on the calling thread before the engine starts (the gradient seed), counted forward."""
    mine = {p: s.kernels for p, s in stats[case].phases.items()}
    theirs = _by_harness_ranges(traces[case])
    assert sum(mine.values()) == len(traces[case].kernels)
    assert mine["optimizer"] == theirs["optimizer"]
    assert (mine["forward"] - theirs["forward"], theirs["backward"] - mine["backward"]) == (1, 1)


@pytest.mark.parametrize("case", CASES)
def test_layers_and_kernels_per_layer(stats, case):
    """The repeating forward block is one decoder layer: as many repeats as the model has layers, 40 kernels each
    at both shapes (the same code runs; only the sizes change)."""
    period = stats[case].periods["forward"]
    assert (period.layers, period.kernels_per_layer) == (MODELS[case[0]][0], 40)
    assert stats[case].periods["backward"].layers == MODELS[case[0]][0]


@pytest.mark.parametrize("case", CASES)
def test_gemm_flops_are_six_per_token_per_gemm_parameter(stats, case):
    """The GEMMs found with their shapes carry 6 x tokens x GEMM parameters FLOPs (forward, dgrad, wgrad of every
    projection and of the tied head; the rotary embedding's one tiny batched matmul adds under 1e-8)."""
    layers, h, heads, kv, d, ffn, vocab = MODELS[case[0]]
    params = layers * (2 * h * heads * d + 2 * h * kv * d + 3 * h * ffn) + h * vocab
    tokens = case[1] * case[2]
    assert sum(g.flops for g in stats[case].gemms) == pytest.approx(6 * tokens * params, rel=1e-7)


@pytest.mark.parametrize("case", CASES)
def test_profile_of_a_real_trace(stats, case):
    """Eager launches, the fused AdamW kernel, no framework syncs (the five per step are the harness's
    torch.cuda.synchronize), a forward layer of 40 kernels."""
    s = stats[case]
    profile = build_profile(s, "x")
    assert (s.gpu_name, s.launch, s.optimizer_impl) == ("NVIDIA H200", "eager", "fused")
    assert sum(p.syncs.get("device", 0) for p in s.phases.values()) == 5
    assert profile["syncs"] == {"per_step": 0} and profile["kernels"]["dense_forward"] == 40
    assert 5e-6 < profile["host"]["per_kernel_s"] < 100e-6


def scenario(model, mb, seq):
    layers, h, heads, kv, _, ffn, vocab = MODELS[model]
    return {"system": {"profile": "h200_x2", "nodes": 1, "gpus": 1},
            "model": {"layers": layers, "hidden": h, "heads": heads, "kv_heads": kv, "ffn_hidden": ffn,
                      "vocab": vocab, "activation": "swiglu", "norm": "rmsnorm", "tied_embeddings": True},
            "parallel": {"tp": 1, "pp": 1, "dp": 1},
            "training": {"seq_len": seq, "micro_batch": mb, "global_batch": mb, "precision": "pure_bf16",
                         "framework": "pytorch"}}


ROUND_TRIPS = [(m, a, b) for m in MODELS for a, b in (((4, 1024), (8, 2048)), ((8, 2048), (4, 1024)))]


def _gpu_round_trip(stats, model, a, b):
    return gpu_round_trip(_path(model, *a), scenario(model, *a), scenario(model, *b),
                          stats[(model, *b)].step_gpu_busy_s)


@pytest.mark.parametrize("model, a, b", ROUND_TRIPS)
def test_gpu_round_trip(stats, model, a, b):
    """Efficiency fitted on one shape's trace and scenario prices the other shape's GPU busy time within 5%
    (measured: Qwen2.5-0.5B +2.4% and -2.1%, Llama-3.2-1B -2.2% and +1.9%). With the shipped table the program
    was -20%, -20%, -16%, -14% before it priced Hugging Face's RMSNorm / RoPE / SwiGLU / residual chains
    (EAGER_CHAINS) and is +5.6%, +3.0%, +7.5%, +8.7% with them: what is left is the shipped bf16 GEMM rate, 11-15%
    slower than these traces' GEMMs (benchmarks/hf_trace_gap.py)."""
    result = _gpu_round_trip(stats, model, a, b)
    assert abs(result.error) < 0.05
    assert 0.0 < result.baseline_error < 0.10      # the shipped table's GEMMs are slower than the traces'


#: calibrated on the host-bound small shape, predicting the GPU-bound large one. The other direction overstates the
#: host: a GPU-bound trace's launch spacing carries the profiler's own cost and the allocator's waits (Qwen2.5-0.5B
#: 55.5 us per kernel against 26 us unprofiled), so it predicts 4x1024 +109% (Qwen2.5-0.5B) and +10.6% (Llama-3.2-1B):
#: docs/trace_calibration.md "Limits".
WHOLE_ROUND_TRIPS = [(m, (4, 1024), (8, 2048)) for m in MODELS]


@pytest.mark.parametrize("model, a, b", WHOLE_ROUND_TRIPS)
def test_whole_round_trip(tmp_path, model, a, b):
    """The issue's round trip: profile and efficiency from one shape's trace, the other shape's measured step
    (host time included) within 5%. Skips only where the implementation-profile machinery is not in the build."""
    try:
        result = trace_round_trip(_path(model, *a), scenario(model, *a), scenario(model, *b),
                                  MEASURED_STEP_S[(model, *b)], tmp_path)
    except ProfilesMissing as missing:
        pytest.skip(str(missing))
    assert abs(result.error) < 0.05
