"""The engines' host time (``serving.host``) and held weight layout (``serving.scheduler.expert_layout_bytes``):
docs/engine_host.md. Every number below is worked by hand."""

from pathlib import Path

import numpy as np
import pytest

from simulator.cli import main
from simulator.implementation.host import EngineHost
from simulator.serving.host import with_host
from simulator.serving.loop import LoopCosts, LoopLimits, run_loop

#: gpt-oss-120b's routed-expert parameters (36 layers x 128 experts x (2 x 2880 x 2880 + 2880 x 2880) weights + their
#: biases; simulator/model/params.py), and the bytes the checkpoint stores per MXFP4 weight (0.5 + 1/32)
GPT_OSS_EXPERTS, MXFP4 = 114_701_598_720, 0.53125


def test_engine_core_host_time_is_added_or_overlapped_and_the_api_server_is_a_floor():
    sync = EngineHost(step_s=0.002, seq_s=1e-4)
    assert sync.engine_s(0.030, 100, 100) == pytest.approx(0.030 + 0.002 + 100 * 1e-4)        # 42 ms
    overlapped = EngineHost(step_s=0.002, seq_s=1e-4, overlap=True)
    assert overlapped.engine_s(0.030, 100, 100) == pytest.approx(0.030)                       # the GPU's 30 ms
    assert overlapped.engine_s(0.005, 100, 100) == pytest.approx(0.012)                       # the host's 2 + 10 ms
    frontend = EngineHost(token_s=5e-5)
    assert frontend.engine_s(0.010, 400, 400) == pytest.approx(400 * 5e-5)                     # 20 ms of streaming
    assert frontend.engine_s(0.010, 400, 0) == pytest.approx(0.010)                            # a prefill emits none
    assert EngineHost().engine_s(0.010, 400, 400) == 0.010


def test_the_loop_prices_each_step_with_its_host_time():
    costs = LoopCosts(decode_s=lambda s, c: 0.010, prefill_s=lambda s, n, p: 0.020, mixed_s=lambda groups: 0.030)
    assert with_host(costs, None) is costs
    per_seq = with_host(costs, EngineHost(seq_s=1e-4))
    assert per_seq.decode_s(10, 500.0) == pytest.approx(0.010 + 10e-4)
    assert per_seq.prefill_s(4, 128, 0) == pytest.approx(0.020 + 4e-4)
    # a mixed step of 10 decodes and 2 chunks of 128 tokens schedules 12 sequences
    assert per_seq.mixed_s(((10, 1, 500.0), (2, 128, 0))) == pytest.approx(0.030 + 12e-4)
    streaming = with_host(costs, EngineHost(token_s=1e-3, request_s=0.05))
    assert streaming.decode_s(50, 500.0) == pytest.approx(0.050)                # 50 tokens x 1 ms over a 10 ms step
    assert streaming.mixed_s(((10, 1, 500.0), (2, 128, 0))) == pytest.approx(0.030)   # 10 tokens: 10 ms < 30 ms
    assert streaming.prefill_s(4, 128, 0) == pytest.approx(0.020)
    assert streaming.request_s == 0.05


def test_the_api_server_hands_requests_to_the_engine_one_after_another():
    # 3 requests of 16 + 2 tokens at t = 0; prefill 20 ms, decode 10 ms. Without per-request work all three prefill
    # together (first tokens at 20 ms, done at 30 ms). With 50 ms each, request i reaches the engine at 50 (i + 1) ms:
    # its prefill ends 20 ms later and its second token 10 ms after that.
    limits = LoopLimits(kv_blocks=100, block_tokens=16)
    plain = LoopCosts(decode_s=lambda s, c: 0.010, prefill_s=lambda s, n, p: 0.020)
    run = run_loop(np.zeros(3), 16, 2, plain, limits)
    assert run.first_token_s.tolist() == pytest.approx([0.02] * 3) and run.finish_s.tolist() == pytest.approx([0.03] * 3)
    serial = LoopCosts(decode_s=lambda s, c: 0.010, prefill_s=lambda s, n, p: 0.020, request_s=0.05)
    run = run_loop(np.zeros(3), 16, 2, serial, limits)
    assert run.first_token_s.tolist() == pytest.approx([0.07, 0.12, 0.17])   # TTFT from the client's t = 0
    assert run.finish_s.tolist() == pytest.approx([0.08, 0.13, 0.18])
    # a closed loop of 2: the request sent when the first finishes (80 ms) waits for the server's queue (100 ms) too:
    # it reaches the engine at max(80, 100) + 50 = 150 ms
    run = run_loop(np.zeros(2), 16, 2, serial, limits, refill=2)
    assert run.arrival_s.tolist() == pytest.approx([0.0, 0.0, 0.08, 0.13])
    assert run.first_token_s.tolist() == pytest.approx([0.07, 0.12, 0.17, 0.22])


def test_a_per_request_stagger_shorter_than_a_step_regroups_the_wave():
    """docs/engine_host.md, "Per-request time ... closed-loop clients": a closed loop of 3 requests of 10 + 2 tokens,
    prefill 100 ms per prompt, decode step 10 ms, 1 ms per request at the API server, by hand:
    A reaches the engine at 1 ms and is prefilled alone (first token 101 ms); B and C (2, 3 ms) wait for that step
    and are prefilled together with A's decode (10 + 2 x 100 ms: first tokens at 311 ms; A ends). A's refill, sent
    at 311 ms, reaches the engine at 312 ms, during B's and C's last decode (ends 321 ms); it is prefilled alone
    (321 -> 421 ms: TTFT 110 ms); B's and C's refills (322, 323 ms) are prefilled together again (421 + 10 + 200 =
    631 ms: TTFT 310 ms). The 1-2 split repeats; without the stagger every prompt of every wave shares one 300 ms
    prefill."""
    limits = LoopLimits(kv_blocks=100, block_tokens=16)
    step = dict(decode_s=lambda s, c: 0.010, prefill_s=lambda s, n, p: 0.100 * s)
    locked = run_loop(np.zeros(3), 10, 2, LoopCosts(**step), limits, refill=3)
    assert (locked.first_token_s - locked.arrival_s).tolist() == pytest.approx([0.300] * 6)
    run = run_loop(np.zeros(3), 10, 2, LoopCosts(**step, request_s=0.001), limits, refill=3)
    assert run.arrival_s.tolist() == pytest.approx([0, 0, 0, 0.311, 0.321, 0.321])
    assert (run.first_token_s - run.arrival_s).tolist() == pytest.approx([0.101, 0.311, 0.311, 0.110, 0.310, 0.310])


def _gpt_oss(framework: str, tp: int = 1, **serving) -> dict:
    return {"name": "t", "system": {"profile": "dgx_h100", "nodes": 1, "gpus": tp},
            "model": {"preset": "gpt-oss-120b", "weight_quantization": {"format": "mxfp4", "modules": "experts"}},
            "parallel": {"tp": tp, "ep": 1, "etp": tp},
            "training": {"mode": "inference", "precision": "fp4", "framework": framework},
            "serving": {"batch": 1, "input_len": 215, "output_len": 196, **serving}}


def test_the_expert_layout_bytes_by_hand():
    from simulator.scenario import load_scenario
    from simulator.serving.host import layout_bytes

    one = load_scenario(_gpt_oss("vllm"))
    # 114,701,598,720 x (0.5656 - 0.53125) B = 3.940 GB (3.67 GiB) held beyond the checkpoint on one H100
    assert layout_bytes(one.serving.scheduler, one.plan) == pytest.approx(GPT_OSS_EXPERTS * (0.5656 - MXFP4))
    assert layout_bytes(one.serving.scheduler, one.plan) / 2**30 == pytest.approx(3.67, abs=0.01)
    two = load_scenario(_gpt_oss("vllm", tp=2))          # experts sharded over etp = 2 ranks: half per GPU
    assert layout_bytes(two.serving.scheduler, two.plan) == pytest.approx(GPT_OSS_EXPERTS * (0.5656 - MXFP4) / 2)
    trt = load_scenario(_gpt_oss("tensorrt_llm"))         # no measured layout for TensorRT-LLM's CUTLASS path
    assert layout_bytes(trt.serving.scheduler, trt.plan) == 0.0
    bf16 = _gpt_oss("vllm")
    del bf16["model"]["weight_quantization"]              # no checkpoint format: nothing to compare against
    s = load_scenario(bf16)
    assert layout_bytes(s.serving.scheduler, s.plan) == 0.0


def test_held_bytes_leave_the_cache_as_each_engine_counts_memory():
    from simulator.entries.serve import serving_context
    from simulator.memory.inference import inference_memory
    from simulator.plan import Batch
    from simulator.scenario import load_scenario
    from simulator.serving.scheduler import kv_blocks

    held = 3.94e9
    # vLLM and SGLang: all of it (their budgets are fractions of total memory less what is loaded); TensorRT-LLM:
    # 0.9 of it (its cache is 0.9 of the memory left free)
    for framework, share in (("vllm", 1.0), ("sglang", 1.0), ("tensorrt_llm", 0.9)):
        s = load_scenario(_gpt_oss(framework))
        ctx, memory = serving_context(s)
        step = inference_memory(s.plan, memory.hbm_capacity_bytes, Batch(1, 8192))
        (stage,) = step.stages
        page = sum(i.bytes for i in stage.items if i.name == "kv_cache") / 8192 * 16      # one 16-token page
        args = (s.serving.scheduler, step, 8192, 16, 0.9, True, 1)
        lost = kv_blocks(*args) - kv_blocks(*args, held=held)
        assert lost == pytest.approx(share * held / page, abs=1)


def test_the_vllm_token_time_is_its_calibration_on_vllm_pr_12287():
    """vLLM's own V1 row (Llama-3.2-1B on one A100, 400 in flight): the GPU alone gives 30,328 output tok/s against
    the published 12,850; the API server's 68.4 us per token (the vllm profile's value) brings the model to it."""
    from simulator.implementation.profiles import profile_named
    from simulator.validation.engine_host import ROW, calibrate, output_rate

    assert ROW["output_tokens"] / ROW["duration_s"] == pytest.approx(ROW["output_tokens_per_s"], rel=1e-3)
    assert output_rate(0.0) == pytest.approx(30_328, rel=0.005)
    token_s = dict(dict(profile_named("vllm").serving_defaults)["host"])["token_s"]
    assert token_s == pytest.approx(calibrate("token_s", 6.7e-5, 7.0e-5, steps=3), rel=0.01)


@pytest.mark.parametrize(("serving", "expect"), [
    ("  host: {seq_s: -1.0e-5}\n", "serving.host.seq_s: Input should be greater than or equal to 0"),
    ("  host: {overlap: sometimes}\n", "serving.host.overlap: Input should be a valid boolean"),
    ("  host: {token_s: 1.0}\n", "serving.host.token_s: Input should be less than or equal to 0.01"),
    ("  scheduler: {policy: vllm_v1, expert_layout_bytes: {mxfp5: 0.6}}\n",
     "serving.scheduler.expert_layout_bytes: unknown checkpoint format 'mxfp5' (one of mxfp4, nvfp4"),
    ("  scheduler: {policy: vllm_v1, expert_layout_bytes: {mxfp4: 0.5}}\n",
     "serving.scheduler.expert_layout_bytes.mxfp4: the engine's expert layout holds 0.5 B per mxfp4 weight, less "
     "than the checkpoint's 0.53125 B"),
])
def test_bad_host_and_layout_values_exit_2(tmp_path: Path, capsys, serving: str, expect: str):
    text = ("name: bad\nsystem: {profile: dgx_h100, nodes: 1, gpus: 1}\n"
            "model: {preset: gpt-oss-120b, weight_quantization: {format: mxfp4, modules: experts}}\n"
            "parallel: {tp: 1}\ntraining: {mode: inference, precision: fp4, framework: vllm}\n"
            "serving:\n  batch: 1\n  input_len: 100\n  output_len: 10\n" + serving)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and expect in err and "Traceback" not in err


def test_a_profile_with_a_bad_host_value_names_the_profile_file(tmp_path: Path, capsys):
    profile = tmp_path / "myvllm.yaml"
    profile.write_text("name: myvllm\nbase: vllm\nserving_defaults:\n  host:\n    token_s: -1.0e-5\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nsystem: {profile: dgx_h100, nodes: 1, gpus: 1}\nmodel: {preset: gpt-oss-120b}\n"
                        "parallel: {tp: 1}\ntraining: {mode: inference, precision: fp4, framework: vllm}\n"
                        "implementation: {file: myvllm.yaml}\nserving: {batch: 1, input_len: 100, output_len: 10}\n")
    assert main(["serve", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert f"{profile}:3: serving_defaults: host.token_s: Input should be greater than or equal to 0" in err
