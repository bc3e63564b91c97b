"""Implementation profiles (simulator/implementation/profiles.py): the shipped registry, scenario integration,
overrides, located errors, and the host-bound step priced from a profile's kernels, checked by hand."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from simulator import load_scenario, simulate
from simulator.compute.host import fit_host_costs
from simulator.errors import UserError
from simulator.implementation.profiles import profile_named, shipped_profiles
from simulator.pricing.host import host_issue_costs

ROOT = Path(__file__).resolve().parents[2]

TINY = {"system": {"profile": "h200_x2", "nodes": 1, "gpus": 1},
        "model": {"layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1024,
                  "activation": "swiglu", "norm": "rmsnorm", "tied_embeddings": True},
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "training": {"seq_len": 128, "micro_batch": 1, "global_batch": 1, "precision": "pure_bf16",
                     "framework": "pytorch"}}


def _tiny(**training):
    data = copy.deepcopy(TINY)
    data["training"].update(training)
    return data


def test_registry_names_and_families():
    names = set(shipped_profiles())
    assert {"megatron", "pytorch", "megatron_core_te", "megatron_core_te_r0_8", "nemo", "torchtitan", "deepspeed",
            "hf_transformers", "hf_trainer", "vllm", "sglang", "tensorrt_llm"} <= names
    assert profile_named("nemo").family == "megatron"
    assert profile_named("hf_trainer").family == "pytorch"
    # base chains merge mappings key by key: nemo inherits megatron_core_te's grad_accumulation, overrides the loss
    assert dict(profile_named("nemo").training_defaults) == {"cross_entropy": "fused", "grad_accumulation": "fused"}


def test_every_shipped_field_has_a_source():
    for name, profile in shipped_profiles().items():
        given = [f for f in ("host", "kernels", "measured_host", "training_defaults", "serving_defaults",
                             "pipeline_p2p", "bf16_grad_sync")
                 if getattr(profile, f) != type(profile).model_fields[f].default]
        for field in given:
            assert profile.source_of(field) or any(k.startswith(field) for k, _ in profile.sources), (name, field)


def test_megatron_profile_carries_the_measured_moe_floor():
    """The legacy profiles keep today's numbers: their measured MoE host seconds are the least-squares fit of
    simulator/validation/data/h200_host/moe_host.jsonl (compute/host.py fit_host_costs)."""
    fit = fit_host_costs()
    m = profile_named("megatron").measured_host
    for mine, theirs in ((m.moe_forward_s, fit.moe_fwd_s), (m.moe_backward_s, fit.moe_bwd_s),
                         (m.per_expert_forward_s, fit.per_expert_fwd_s),
                         (m.per_expert_backward_s, fit.per_expert_bwd_s)):
        assert mine == pytest.approx(theirs, rel=5e-4)
    h = host_issue_costs(profile_named("megatron"))
    assert h.layer(False, 0) == (0.0, 0.0) and not h.moe_runs_ahead


def test_unknown_framework_lists_the_profiles():
    with pytest.raises(UserError) as err:
        load_scenario(_tiny(framework="hf_transformerz"))
    assert "hf_transformers" in str(err.value) and "training.framework" in str(err.value)


def test_profile_defaults_apply_and_explicit_keys_win():
    hf = load_scenario(_tiny(framework="hf_transformers"))
    assert hf.training.gradient_lifetime == "per_layer" and hf.training.loss_implementation == "hf_fp32"
    mine = load_scenario(_tiny(framework="hf_transformers", gradient_lifetime="endpoints"))
    assert mine.training.gradient_lifetime == "endpoints"


def test_implementation_overrides_and_file(tmp_path):
    over = load_scenario(dict(_tiny(framework="hf_transformers"), implementation={"host": {"per_kernel_s": 1e-4}}))
    assert over.training.profile.host.per_kernel_s == 1e-4
    assert over.training.profile.kernels.dense_forward == 41          # the rest of hf_transformers is kept
    path = tmp_path / "mine.profile.yaml"
    path.write_text("name: mine\nbase: hf_transformers\nhost:\n  per_kernel_s: 5.0e-5\n", encoding="utf-8")
    from_file = load_scenario(dict(_tiny(), implementation=str(path)))
    assert from_file.training.profile.name == "mine" and from_file.training.profile.host.per_kernel_s == 5e-5
    assert from_file.training.profile.kernels.dense_backward == 84    # from its base
    bad = tmp_path / "bad.profile.yaml"
    bad.write_text("name: bad\nhost:\n  per_kernel_s: -1\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        load_scenario(dict(_tiny(), implementation=str(bad)))
    assert "bad.profile.yaml" in str(err.value) and "host.per_kernel_s" in str(err.value)
    with pytest.raises(UserError) as err:
        load_scenario(dict(_tiny(), implementation={"kernels": {"dense_forwrd": 3}}))
    assert "implementation.kernels.dense_forwrd" in str(err.value)


def _hand_profile(per_kernel_s):
    return {"host": {"per_kernel_s": per_kernel_s, "backward_kernel_s": per_kernel_s},
            "kernels": {"dense_forward": 40, "dense_backward": 80, "per_step": 0}}


def test_host_bound_step_by_hand():
    """4 layers x (40 forward + 80 backward) kernels at 1 ms each: the host needs 160 ms forward and 320 ms
    backward per micro-batch, far above the tiny model's GPU work, and no layer syncs: the step is the host's
    480 ms plus the optimizer (GPU) -- the breakdown's host part is 480 ms less the GPU work it hides."""
    base = simulate(load_scenario(_tiny()))
    bound = simulate(load_scenario(dict(_tiny(), implementation=_hand_profile(1e-3))))
    gpu_fwd_bwd = base.step.step_s - base.step.optimizer_s
    assert bound.step.step_s - bound.step.optimizer_s == pytest.approx(0.480, rel=1e-9)
    assert bound.step.host_s == pytest.approx(0.480 - gpu_fwd_bwd, rel=1e-6)


def test_gpu_bound_step_ignores_a_cheap_host():
    """At 1 ns per kernel the host (120 ns per layer) hides under the GPU work: the step is unchanged."""
    base = simulate(load_scenario(_tiny()))
    cheap = simulate(load_scenario(dict(_tiny(), implementation=_hand_profile(1e-9))))
    assert cheap.step.step_s == pytest.approx(base.step.step_s, rel=1e-12)
    assert cheap.step.host_s == 0.0


def test_run_ahead_vs_per_layer_sync():
    """With a sync in every layer the host cannot run ahead: each layer takes max(GPU, host) on its own. Here every
    layer is host-bound: the sync adds its own host cost (1 ms x 4 layers), and the embedding's and head's GPU work,
    which the run-ahead host hid, now shows (the host waits for it): 4 ms < difference < 4 ms + the GPU work."""
    ahead = simulate(load_scenario(dict(_tiny(), implementation=_hand_profile(1e-3))))
    synced = dict(_hand_profile(1e-3), syncs={"dense_forward": 1}, )
    synced["host"] = dict(synced["host"], per_sync_s=1e-3)
    per_layer = simulate(load_scenario(dict(_tiny(), implementation=synced)))
    base = simulate(load_scenario(_tiny()))
    diff = per_layer.step.step_s - ahead.step.step_s
    assert 4e-3 < diff < 4e-3 + (base.step.step_s - base.step.optimizer_s)


def test_trace_shows_the_host_lane():
    """The Chrome trace of a host-bound step has a ``host`` thread whose bars add up to the step's host wait."""
    from simulator.report.trace import chrome_trace

    result = simulate(load_scenario(dict(_tiny(), implementation=_hand_profile(1e-3))))
    trace = chrome_trace(result.step)
    threads = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert "host" in threads
    host_us = sum(e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e["tid"] == threads["host"])
    assert host_us == pytest.approx(result.step.host_s * 1e6, rel=1e-9)


def test_serving_engine_profiles_set_the_serving_keys():
    """``training.framework`` on a serving scenario fills the engine's kernels, cache and graph keys the scenario
    did not write: hf_transformers' eager generate (hf_eager kernels, concatenating cache, no graphs), vLLM's fused
    kernels, paged cache and CUDA graphs."""
    from simulator.validation.serving_hf import hf_scenario

    data = hf_scenario("eager", "llama-3.2-1b", 1, 512)
    for key in ("kernels", "kv_cache_impl"):
        del data["serving"][key]
    hf = load_scenario(dict(data, training=dict(data["training"], framework="hf_transformers"))).serving
    assert (hf.kernels, hf.kv_cache_impl, hf.cuda_graphs) == ("hf_eager", "concat", False)
    vllm = load_scenario(dict(data, training=dict(data["training"], framework="vllm"))).serving
    assert (vllm.kernels, vllm.kv_cache_impl, vllm.cuda_graphs) == ("fused", "paged", True)
