"""Implementation profiles (simulator/implementation/profiles/): the shipped files load, carry sources, keep the
historical numbers, and a bad file or override is a located UserError."""

import pytest

from simulator.compute.host import EAGER_PYTORCH_H200_HOST as HOST
from simulator.errors import UserError
from simulator.implementation.registry import (
    load_profile,
    profile_named,
    profile_names,
    scenario_implementation,
    shipped_profiles,
)
from simulator.serving.backends import KERNEL_SETS

REQUIRED = {"megatron", "pytorch", "megatron_core_te", "megatron_core_te_r0_9", "nemo", "torchtitan", "deepspeed",
            "hf_transformers", "hf_trainer", "vllm", "sglang", "tensorrt_llm"}


def test_the_required_profiles_ship_and_every_number_has_a_source():
    profiles = shipped_profiles()
    assert REQUIRED <= set(profiles)
    for p in profiles.values():
        assert p.sources, p.name
        assert all(isinstance(v, str) and v for v in p.sources.values()), p.name


def test_the_historical_names_keep_the_measured_moe_floor():
    for name in ("megatron", "pytorch", "megatron_core_te"):
        p = profile_named(name)
        assert p.layer_host_s(False, 0) == (0.0, 0.0)
        fwd, bwd = p.layer_host_s(True, 8)
        assert fwd == pytest.approx(HOST.moe_fwd_s + 8 * HOST.per_expert_fwd_s, rel=1e-12)
        assert bwd == pytest.approx(HOST.moe_bwd_s + 8 * HOST.per_expert_bwd_s, rel=1e-12)
    assert profile_named("megatron").megatron_layout and profile_named("pytorch").pytorch_layout


def test_hf_transformers_host_time_by_hand():
    p = profile_named("hf_transformers")
    # 41 kernels x 30 us forward, 83 x 30 us backward (simulator/validation/data/h200_hf/train.jsonl fits)
    assert p.layer_host_s(False, 0) == pytest.approx((41 * 30e-6, 83 * 30e-6))
    # the per-expert loop: 92 + 12.7 x 64 kernels and 4.4 x 64 syncs of 10 us in a forward
    loop = profile_named("hf_transformers_expert_loop")
    assert loop.layer_host_s(True, 64)[0] == pytest.approx((92 + 12.7 * 64) * 30e-6 + 4.4 * 64 * 10e-6)
    # fused AdamW: 5.2e-8 kernels per parameter: 494 M parameters -> 25.7 kernels x 30 us
    assert p.optimizer_host_s(290, 494e6) == pytest.approx(494e6 * 5.2e-8 * 30e-6)


def test_serving_engines_carry_their_kernel_set_numbers():
    for name in profile_names(trains=False):
        p = profile_named(name)
        k = KERNEL_SETS[p.serving_kernel_set]
        assert (p.kernels.dense_forward, p.kernels.moe_forward, p.kernels.per_step) == (
            k.per_layer, k.per_moe_layer, k.per_step)
        assert p.host.per_kernel_s == k.host_launch_s and p.graphs


def test_an_unknown_name_lists_the_names():
    with pytest.raises(UserError) as err:
        profile_named("megatorn")
    assert err.value.key_path == "training.framework" and "hf_transformers" in err.value.message


def test_a_bad_profile_file_is_located(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nlabel: x\nfamily: pytorch\nversion: '1'\nhost:\n  per_kernel_s: -1\nsources: {}\n")
    with pytest.raises(UserError) as err:
        load_profile(path)
    assert (err.value.file, err.value.line, err.value.key_path) == (str(path), 6, "host.per_kernel_s")
    path.write_text("name: mine\nlabel: x\nbase: hf_transformers\nkernelz: 3\n")
    with pytest.raises(UserError) as err:
        load_profile(path)
    assert (err.value.line, err.value.key_path) == (4, "kernelz") and "unknown key" in err.value.message
    path.write_text("name: mine\nlabel: x\nbase: nothing\n")
    with pytest.raises(UserError) as err:
        load_profile(path)
    assert err.value.key_path == "base" and err.value.line == 3


def test_a_profile_file_inherits_its_base_and_overrides_merge(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nlabel: mine\nbase: hf_transformers\nhost:\n  per_kernel_s: 20.0e-6\n"
                    "sources:\n  host.per_kernel_s: a measurement\n")
    mine = load_profile(path)
    assert mine.host.per_kernel_s == 20e-6 and mine.host.per_sync_s == 10e-6 and mine.kernels.dense_forward == 41
    assert mine.family == "pytorch" and "kernels.dense_forward" in mine.sources
    over = scenario_implementation("megatron", {"file": str(path), "kernels": {"dense_forward": 50}})
    assert over.kernels.dense_forward == 50 and over.host.per_kernel_s == 20e-6
    over = scenario_implementation("hf_transformers", {"optimizer": {"impl": "for_loop", "kernels_per_tensor": 12}})
    assert over.optimizer.impl == "for_loop" and over.optimizer.moments_dtype == "bf16"
    with pytest.raises(UserError) as err:
        scenario_implementation("hf_transformers", {"optimizer": {"impl": "loop"}})
    assert err.value.key_path == "implementation.optimizer.impl"
