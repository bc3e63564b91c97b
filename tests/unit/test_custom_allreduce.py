"""Custom one-shot / two-shot all-reduce (simulator/collectives/custom_allreduce.py): the engines' selection rules,
the fitted kernel times by hand, NCCL beside them, and the serving engines' defaults."""

import pytest

from simulator.collectives import build_cost_model, evaluate, placement_for_profile
from simulator.collectives.custom_allreduce import KERNELS, choose
from simulator.entries.serve import simulate_serving
from simulator.scenario import load_scenario

KiB, MiB = 2**10, 2**20


@pytest.mark.parametrize(("engine", "ranks", "nbytes", "algorithm"), [
    ("vllm_custom", 8, 256 * KiB - 16, "one_shot"), ("vllm_custom", 8, 256 * KiB, "two_shot"),
    ("vllm_custom", 4, 512 * KiB - 16, "one_shot"), ("vllm_custom", 4, 512 * KiB, "two_shot"),
    ("vllm_custom", 2, 8 * MiB - 16, "one_shot"), ("vllm_custom", 2, 8 * MiB, None),
    ("vllm_custom", 6, 300 * KiB, "two_shot"),
    ("trtllm_custom", 8, 499_999, "one_shot"), ("trtllm_custom", 8, 500_000, "two_shot"),
    ("trtllm_custom", 4, 999_999, "one_shot"), ("trtllm_custom", 8, 8_000_001, None),
    ("trtllm_custom", 2, 15_999_999, "one_shot"), ("trtllm_custom", 2, 16_000_001, None),
    ("sglang_custom", 8, 8 * MiB - 16, "two_shot"), ("sglang_custom", 8, 8 * MiB, None),
])
def test_each_engines_rule(engine, ranks, nbytes, algorithm):
    chosen = choose(engine, placement_for_profile("dgx_h100", ranks), nbytes)
    assert (chosen and chosen[0]) == algorithm


def test_no_custom_kernel_across_nodes_or_without_nvlink():
    assert choose("vllm_custom", placement_for_profile("dgx_h100", 16), 64 * KiB) is None


def test_kernel_times_by_hand():
    """vLLM one-shot, TP 8, 32 KiB on H100 (450 GB/s NVLink): 8.75 us + 7 x 32 KiB / 64.1 GB/s = 12.33 us (the
    sgl-project/sglang#2904 measurement it was fitted to: 11.8 us); two-shot, 4 MiB: 15.96 us + 2 x 7/8 x 4 MiB /
    64.1 GB/s = 130.5 us."""
    h100 = placement_for_profile("dgx_h100", 8)
    assert h100.intra_bw_Bps == 450e9
    assert choose("vllm_custom", h100, 32 * KiB)[1] == pytest.approx(8.75e-6 + 7 * 32768 / 64.1e9, rel=1e-9)
    assert choose("vllm_custom", h100, 4 * MiB)[1] == pytest.approx(15.96e-6 + 1.75 * 4 * MiB / 64.1e9, rel=1e-9)
    assert KERNELS["vllm"].read_fraction * 450e9 == pytest.approx(64.1e9)


def test_forced_in_the_collectives_table_and_never_auto():
    """``--algo one_shot`` prices vLLM's kernel; NCCL's auto choice never picks a custom kernel."""
    model = build_cost_model(placement_for_profile("dgx_h100", 8))
    sizes = [32 * KiB, 4 * MiB]
    forced = evaluate(model, "all_reduce", sizes, "one_shot").times_s
    assert forced[0] == pytest.approx(8.75e-6 + 7 * 32768 / 64.1e9, rel=1e-9)
    assert set(evaluate(model, "all_reduce", sizes).algorithms) <= {"ring", "tree", "nvls"}


def _serve(framework: str | None, batch: int, **serving) -> dict:
    sc = {"system": {"profile": "dgx_h100", "nodes": 1}, "model": {"preset": "llama3-70b"}, "parallel": {"tp": 8},
          "training": {"mode": "inference", "precision": "bf16", **({"framework": framework} if framework else {})},
          "serving": {"batch": batch, "input_len": 1024, "output_len": 1, **serving}}
    step = simulate_serving(load_scenario(sc)).decode
    return next(c for c in step.comm if c["dim"] == "tp" and c["op"] == "all_reduce")


def test_engine_profiles_pick_their_kernel():
    """Llama-3-70B TP 8 decode: 2 tokens x 8192 x 2 B = 32 KiB per all-reduce is inside the measured table (vLLM
    11.8 us); 256 tokens = 4 MiB is beyond it: vLLM's two-shot model (130.5 us); 1024 tokens = 16 MiB is over vLLM's
    8 MiB: NCCL. Without an engine profile the default is NCCL."""
    small = _serve("vllm", 2)
    assert small["algorithm"] == "vllm_custom/one_shot" and small["time_s"] == pytest.approx(11.8e-6)
    big = _serve("vllm", 256)
    assert big["algorithm"] == "vllm_custom/two_shot"
    assert big["time_s"] == pytest.approx(15.96e-6 + 1.75 * 4 * MiB / 64.1e9, rel=1e-9)
    assert not _serve("vllm", 1024)["algorithm"].startswith("vllm_custom")
    assert _serve("sglang", 2)["algorithm"] == "sglang_custom/one_shot"
    assert _serve("tensorrt_llm", 256)["algorithm"] == "trtllm_custom/two_shot"   # 4 MiB >= 500 kB on 8 ranks
    assert not _serve(None, 2)["algorithm"].startswith(("vllm", "sglang", "trtllm"))
