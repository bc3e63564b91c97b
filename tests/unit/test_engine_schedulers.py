"""Engine schedulers (simulator/serving/scheduler.py) on hand-worked schedules, their memory rules by hand, the
engine profiles' data, and the mixed prefill+decode step priced as one forward (simulator/serving/step.py)."""

from types import SimpleNamespace

import numpy as np
import pytest

from simulator.entries.serve import serving_context
from simulator.errors import UserError
from simulator.implementation.profiles import profile_named
from simulator.implementation.scheduler import EngineScheduler
from simulator.memory.runtime import CUDA_CONTEXT_BYTES
from simulator.plan import Batch
from simulator.scenario import load_scenario
from simulator.serving.loop import LoopCosts, LoopLimits, run_loop
from simulator.serving.scheduler import Sglang, TrtLlm, VllmV1, policy_of, trtllm_bench_limits
from simulator.serving.step import mixed_step_time, step_time

MS, GiB = 1e-3, 2**30
#: decode 10 ms a step whatever the batch; prefill 1 ms per token computed
FLAT = LoopCosts(decode_s=lambda seqs, context: 10 * MS, prefill_s=lambda seqs, new, past: seqs * new * MS)


def limits(blocks: int, policy: str | None, **kw) -> LoopLimits:
    sched = None if policy is None else EngineScheduler(policy=policy, **kw)
    return LoopLimits(kv_blocks=blocks, block_tokens=1, scheduler=sched)


def test_trtllm_guaranteed_no_evict_waits_for_the_whole_length():
    """10 one-token pages, two requests of prompt 4 + output 3 at t = 0. GUARANTEED_NO_EVICT admits A (its 7 pages
    fit), then B needs 7 pages beside the 3 A still needs to finish: 10 - 4 held - 3 = 3 < 7, so B waits. A: prefill
    4 ms (first token 4 ms), decodes at 14 and 24 ms; B then prefills (28 ms) and decodes (38, 48 ms). No
    preemption. MAX_UTILIZATION (and vLLM V1) admit both at once (8 pages) and must preempt when they grow."""
    run = run_loop(np.zeros(2), 4, 3, FLAT, limits(10, "trtllm"))
    assert run.first_token_s * 1e3 == pytest.approx([4, 28])
    assert run.finish_s * 1e3 == pytest.approx([24, 48])
    assert run.preemptions == 0
    greedy = run_loop(np.zeros(2), 4, 3, FLAT, limits(10, "trtllm", capacity="max_utilization"))
    assert greedy.first_token_s * 1e3 == pytest.approx([8, 8]) and greedy.preemptions >= 1
    vllm = run_loop(np.zeros(2), 4, 3, FLAT, limits(10, "vllm_v1"))
    assert vllm.finish_s == pytest.approx(greedy.finish_s) and vllm.preemptions == greedy.preemptions


def test_sglang_reserves_the_running_requests_future_tokens():
    """20 one-token pages, two requests of prompt 4 + output 8 at t = 0. SGLang admits A (4 + 8 = 12 < 20 free) and
    takes 12 off the budget: B (12 >= 8) waits. While A decodes, rem_total = free - A's remaining output x ratio:
    (16 - j) - (7 - j) x r_j <= 11.1 < 12 for every step j, so B starts only when A ends (no preemption). A: prefill
    4 ms, 7 decodes -> 74 ms; B: prefill to 78 ms, done at 148 ms. vLLM admits both at once (8 of 20 pages)."""
    run = run_loop(np.zeros(2), 4, 8, FLAT, limits(20, "sglang"))
    assert run.first_token_s * 1e3 == pytest.approx([4, 78])
    assert run.finish_s * 1e3 == pytest.approx([74, 148])
    vllm = run_loop(np.zeros(2), 4, 8, FLAT, limits(20, "vllm_v1"))
    assert vllm.first_token_s * 1e3 == pytest.approx([8, 8])


def test_sglang_retracts_the_newest_of_the_fewest_outputs_when_a_decode_step_does_not_fit():
    """7 one-token pages, remaining output clipped at 1 token: A (2 + 1 = 3 < 7) and B (3 < 7 - 3) are admitted and
    prefilled together (4 ms, first tokens), decode once (14 ms: 6 pages used). The next decode needs 2 pages, 1 is
    free: B (as few outputs as A, the newer) is retracted and A ends at 24 ms; B recomputes its prompt and 2 outputs
    (4 tokens, 4 ms) and samples its last token at 28 ms."""
    run = run_loop(np.zeros(2), 2, 3, FLAT, limits(7, "sglang", clip_max_new_tokens=1))
    assert run.first_token_s * 1e3 == pytest.approx([4, 4])
    assert run.finish_s * 1e3 == pytest.approx([24, 28])
    assert run.preemptions == 1


def test_a_request_the_admission_rule_never_takes_is_an_error_not_a_hang():
    """SGLang admits only while input + output < free tokens: 4 + 6 on a 10-token cache never starts, although its
    9 cached tokens (the last output is never written) would fit."""
    with pytest.raises(ValueError, match="cannot admit the 1 waiting request"):
        run_loop(np.zeros(1), 4, 6, FLAT, limits(10, "sglang"))


def test_sglang_prefill_runs_alone_while_vllm_mixes_it_with_the_decodes():
    """A at t = 0 and B at 5 ms, prompt 4 + output 3, a roomy cache. Both: A prefills (4 ms), decodes to 14 ms,
    then B is admitted. SGLang: a prefill step of B alone (4 ms: B's first token at 18 ms), then decode steps of
    both (28 ms: A ends; 38 ms: B ends). vLLM V1: one step with A's decode and B's prefill (10 + 4 ms, priced as
    their sum without a mixed price): A ends and B's first token at 28 ms, B ends at 48 ms."""
    times = np.array([0.0, 5 * MS])
    sg = run_loop(times, 4, 3, FLAT, limits(100, "sglang"))
    assert sg.first_token_s * 1e3 == pytest.approx([4, 18])
    assert sg.finish_s * 1e3 == pytest.approx([28, 38])
    vl = run_loop(times, 4, 3, FLAT, limits(100, "vllm_v1"))
    assert vl.first_token_s * 1e3 == pytest.approx([4, 28])
    assert vl.finish_s * 1e3 == pytest.approx([28, 48])


def test_memory_rules_by_hand():
    """100 GiB GPU, 2 GiB runtime, a stage of 60 GiB at its peak of which 20 GiB cache and 30 GiB weights.
    vLLM 0.9: 0.9 x 100 - (2 - 0.61) - 40 = 48.61 GiB (fraction of TOTAL memory); TensorRT-LLM 0.9: 0.9 x (100 - 2
    - 40) = 52.2 GiB (fraction of FREE memory); SGLang at TP 8 without a fraction (a GPU of 100-160 GiB): (100 - 12
    - 8 x 0.5) / 100 = 0.84 of total for weights and cache: 84 - 30 = 54 GiB; with mem_fraction_static 0.8: 50 GiB.
    On an 80 GiB GPU at TP 1 SGLang keeps 9.5 + 0.5 = 10 GiB out."""
    memory = SimpleNamespace(hbm_capacity_bytes=100 * GiB, runtime_bytes=2 * GiB)
    stage = SimpleNamespace(peak=60 * GiB, bucket=lambda name: {"weights": 30 * GiB}[name])
    kv = 20 * GiB
    assert VllmV1().kv_free_bytes(memory, stage, kv, 0.9, True, 8) == pytest.approx(
        0.9 * 100 * GiB - (2 * GiB - CUDA_CONTEXT_BYTES) - 40 * GiB)
    trt = TrtLlm(EngineScheduler(policy="trtllm"))
    assert trt.kv_free_bytes(memory, stage, kv, 0.9, True, 8) == pytest.approx(52.2 * GiB)
    sg = Sglang(EngineScheduler(policy="sglang"))
    assert sg.kv_free_bytes(memory, stage, kv, 0.92, False, 8) == pytest.approx(54 * GiB)
    assert sg.kv_free_bytes(memory, stage, kv, 0.8, True, 8) == pytest.approx(50 * GiB)
    assert EngineScheduler(policy="sglang").reserved_bytes(80 * GiB, 1) == 10 * GiB


def test_engine_profiles_carry_their_rules_with_sources():
    for name, policy in (("vllm", "vllm_v1"), ("sglang", "sglang"), ("tensorrt_llm", "trtllm")):
        profile = profile_named(name)
        assert dict(profile.serving_defaults)["scheduler"]["policy"] == policy
        assert "@" in profile.source_of("serving_defaults.scheduler")
    assert policy_of(EngineScheduler(policy="sglang")).mixed is False
    assert policy_of(EngineScheduler(policy="vllm_v1")).mixed and policy_of(EngineScheduler(policy="trtllm")).mixed
    assert policy_of(EngineScheduler(policy="sglang", mixed_batch=True)).mixed and policy_of(None).mixed is False


def scenario(framework: str | None = None, **serving) -> dict:
    training = {"mode": "inference", "precision": "bf16", **({"framework": framework} if framework else {})}
    return {"system": {"profile": "hgx_h200", "gpus": 4}, "model": {"preset": "llama3-70b"}, "parallel": {"tp": 4},
            "training": training, "serving": {"batch": 8, "input_len": 1024, "output_len": 64, **serving}}


def test_a_scenario_override_merges_into_the_profile_scheduler():
    """The tensorrt_llm profile's scheduler with only ``capacity`` overridden keeps its other fields."""
    s = load_scenario(scenario("tensorrt_llm", scheduler={"capacity": "max_utilization"})).serving
    assert s.scheduler.policy == "trtllm" and s.scheduler.capacity == "max_utilization"
    assert s.scheduler.chunked_prefill is False and s.max_num_seqs == 2048 and s.gpu_memory_utilization == 0.9


@pytest.mark.parametrize(("sched", "words"), [
    ({"policy": "sglang", "capacity": "max_utilization"}, "capacity is a trtllm setting"),
    ({"policy": "sglang", "new_token_ratio": 1.5}, "less than or equal to 1"),
    ({"policy": "orca"}, "vllm_v1"),
    ({"policy": "vllm_v1", "limits": "trtllm_bench"}, "trtllm-bench's rule"),
    ({"policy": "sglang", "reserved_gib": [[160, 12, 0.5], [90, 9.5, 0.5]]}, "bounds increasing"),
])
def test_bad_scheduler_is_a_located_error(sched, words):
    with pytest.raises(UserError) as err:
        load_scenario(scenario(scheduler=sched))
    assert "serving.scheduler" in str(err.value) and words in str(err.value)


def test_mixed_step_reads_the_weights_once_and_sums_the_attention():
    """Llama-3-70B TP 4 on H200: 16 decodes at 2048 context plus one 32-token prefill chunk. As one forward the
    GEMMs see 48 tokens, still weight-bound: their time is the decode step's plus the 32 extra activation rows
    read and written (K + N per GEMM: qkv 8192 + 2560, o 2048 + 8192, gate/up 8192 + 14336, down 7168 + 8192 =
    58,880 x 2 B x 32 rows x 80 layers = 301.5 MB, and one more LM-head row, (8192 + 32,128) x 2 B: the vocabulary
    padded to 128,512, a multiple of 128 x TP) at 0.803 x 4.8 TB/s = 78.2 us; about half the two steps' sum,
    which reads the weights twice. Attention is one op per part, exactly the sum of the parts'; the memory-bound
    kernels scale with tokens, so they sum too, less one launch (one embedding lookup kernel instead of two)."""
    sc = load_scenario(scenario(cuda_graphs=False))
    ctx, _ = serving_context(sc)
    rp = sc.plan
    decode, chunk = Batch(16, 1, 2048), Batch(1, 32, 0)
    mixed = mixed_step_time(ctx, rp, (decode, chunk)).breakdown_s
    d = step_time(ctx, rp, decode, phase="decode", graphs=False).breakdown_s
    p = step_time(ctx, rp, chunk, phase="prefill", graphs=False).breakdown_s
    assert mixed["attention"] == pytest.approx(d["attention"] + p["attention"], rel=1e-12)
    assert mixed["memory_ops"] == pytest.approx(d["memory_ops"] + p["memory_ops"] - ctx.eff.launch_s, rel=1e-12)
    extra = (32 * 58_880 * 2 * 80 + (8192 + 128_512 // 4) * 2) / (4.8e12 * 0.803)
    assert extra == pytest.approx(78.2e-6, rel=1e-3)
    assert mixed["gemm"] == pytest.approx(d["gemm"] + extra, rel=1e-9)
    assert mixed["gemm"] < 0.51 * (d["gemm"] + p["gemm"])


def test_trtllm_bench_limits_by_hand():
    """trtllm-bench's rule for 70.55 B parameters in fp8 (1 B), 80 layers x 8 K/V heads x 128, an fp8 cache, 80 GiB
    GPUs. TP 4, 1024 + 1024: one token 2 x 80 x 8 x 128 B = 1.526e-4 GiB, weights 65.71 GiB, cache (320 - 65.71) x
    0.95 = 241.58 GiB = 773.1 requests of 2048 tokens: batch 128 x ceil(773.1 / 128) = 896; tokens 773.1 x 2 = 1546
    -> the floor 2048. TP 8, 2048 + 128: cache 545.58 GiB = 1643.2 requests: batch 256 x 7 = 1792; tokens 1643.2 x 17
    = 27,934 -> 1024 x 28 = 28,672."""
    common = {"params": 70.55e9, "weight_dtype": "fp8", "kv_layers": 80, "kv_heads_held": 8, "head_dim": 128,
              "kv_bytes": 1.0, "device_bytes": 80 * GiB, "pp": 1}
    assert trtllm_bench_limits(**common, tp=4, input_len=1024, output_len=1024) == (896, 2048)
    assert trtllm_bench_limits(**common, tp=8, input_len=2048, output_len=128) == (1792, 28672)


def test_trtllm_bench_limits_reach_the_loop():
    """``limits: trtllm_bench`` replaces the profile's 8192 tokens / 2048 sequences: Llama-3-70B (70,553,706,496
    parameters, bf16: 131.41 GiB) at TP 4 on H200s of 143,771 MiB (561.6 GiB), 1024 + 64 tokens: cache (561.6 -
    131.41) x 0.95 = 408.7 GiB over 2 x 80 x 8 x 128 x 2 B x 1088 = 0.332 GiB a request = 1230.8 requests: batch
    256 x 5 = 1280, tokens 1230.8 x 17 = 20,924 -> 1024 x 21 = 21,504."""
    from simulator.serving.loop_inputs import loop_limits

    sc = load_scenario(scenario("tensorrt_llm", scheduler={"limits": "trtllm_bench"}))
    ctx, memory = serving_context(sc)
    lim = loop_limits(ctx, sc.plan, memory)
    assert (lim.max_batched_tokens, lim.max_num_seqs) == (21504, 1280)
