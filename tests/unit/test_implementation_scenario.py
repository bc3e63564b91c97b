"""A scenario names an implementation profile (``training.framework``) and overrides it (``implementation:``);
the plan carries it, its training_defaults fill the keys the scenario leaves out, bad input is located."""

import pytest

from simulator.errors import UserError
from simulator.scenario import load_scenario

MODEL = {"name": "tiny", "layers": 4, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000}
MODEL_YAML = "model: {name: tiny, layers: 4, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 32000}\n"
BASE = {"system": {"profile": "h200_x2", "gpus": 1}, "model": MODEL,
        "parallel": {"tp": 1}, "training": {"seq_len": 1024, "micro_batch": 4, "global_batch": 4}}


def _with(training=None, **top):
    return {**BASE, "training": {**BASE["training"], **(training or {})}, **top}


def test_a_profile_name_reaches_the_plan_with_its_defaults():
    s = load_scenario(_with({"framework": "hf_transformers"}))
    assert s.plan.implementation.name == "hf_transformers" and s.plan.implementation.pytorch_layout
    assert s.plan.training.loss_implementation == "hf_fp32" and s.plan.training.gradient_lifetime == "per_layer"
    assert s.plan.recipe.eager                              # plain PyTorch accounting
    trainer = load_scenario(_with({"framework": "hf_trainer"}))
    assert trainer.plan.training.precision == "amp_bf16"    # TrainingArguments(bf16=True) over fp32 parameters


def test_an_explicit_training_key_wins_over_the_profile_default():
    s = load_scenario(_with({"framework": "hf_trainer", "precision": "bf16", "gradient_lifetime": "endpoints"}))
    assert s.plan.training.precision == "bf16" and s.plan.training.gradient_lifetime == "endpoints"
    nemo = load_scenario(_with({"framework": "nemo"}))
    mcore = load_scenario(_with({"framework": "megatron_core_te"}))
    assert (nemo.plan.recipe.cross_entropy, mcore.plan.recipe.cross_entropy) == ("fused", "unfused")
    assert load_scenario(_with({"framework": "nemo", "cross_entropy": "unfused"})).plan.recipe.cross_entropy == "unfused"


def test_historical_names_are_unchanged():
    s = load_scenario(_with())
    assert s.plan.implementation.name == "megatron" and s.plan.training == load_scenario(BASE).plan.training
    assert load_scenario(_with({"framework": "pytorch"})).plan.training.loss_implementation is None


def test_unknown_and_serving_names_exit_2_listing_the_names():
    for name, why in (("megatorn", "not a registered"), ("vllm", "serving engine")):
        with pytest.raises(UserError) as err:
            load_scenario(_with({"framework": name}))
        assert err.value.key_path == "training.framework" and why in err.value.message
        assert "hf_transformers" in err.value.message


def test_implementation_overrides_and_files(tmp_path):
    s = load_scenario(_with({"framework": "hf_transformers"}, implementation={"host": {"per_kernel_s": 20e-6}}))
    assert s.plan.implementation.host.per_kernel_s == 20e-6 and s.plan.implementation.kernels.dense_forward == 41
    profile = tmp_path / "mine.yaml"
    profile.write_text("name: mine\nlabel: calibrated\nbase: hf_transformers\nkernels:\n  dense_forward: 50\n"
                       "sources:\n  kernels.dense_forward: a trace\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("system: {profile: h200_x2, gpus: 1}\n" + MODEL_YAML
                        + "training: {seq_len: 1024, micro_batch: 4, global_batch: 4}\nimplementation: mine.yaml\n")
    s = load_scenario(scenario)
    assert s.plan.implementation.name == "mine" and s.plan.implementation.kernels.dense_forward == 50
    assert s.plan.training.loss_implementation == "hf_fp32"     # the base's defaults come along
    scenario.write_text("system: {profile: h200_x2, gpus: 1}\n" + MODEL_YAML
                        + "training: {seq_len: 1024, micro_batch: 4, global_batch: 4}\nimplementation:\n"
                        "  file: mine.yaml\n  host:\n    per_kernel_s: fast\n")
    with pytest.raises(UserError) as err:
        load_scenario(scenario)
    assert (err.value.file, err.value.line, err.value.key_path) == (
        str(scenario), 7, "implementation.host.per_kernel_s")


def test_a_graph_profile_defaults_host_launch_and_bad_defaults_are_named(tmp_path):
    graphs = tmp_path / "graphs.yaml"
    graphs.write_text("name: graphs\nlabel: captured\nbase: hf_transformers\nlaunch: cuda_graphs\nsources: {}\n")
    s = load_scenario(_with({"framework": "hf_transformers"}, implementation=str(graphs)))
    assert s.plan.training.host_launch == "cuda_graphs"
    assert load_scenario(_with({"host_launch": "eager"}, implementation=str(graphs))).plan.training.host_launch == "eager"
    with pytest.raises(UserError) as err:
        load_scenario(_with(implementation={"training_defaults": {"seq_length": 4096}}))
    assert err.value.key_path == "implementation.training_defaults" and "seq_length" in err.value.message
    with pytest.raises(UserError) as err:
        load_scenario(_with(implementation={"training_defaults": {"precision": "bf17"}}))
    assert err.value.key_path == "implementation.training_defaults.precision"
    with pytest.raises(UserError) as err:
        load_scenario(_with(implementation={"file": str(tmp_path / "missing.yaml")}))
    assert "file not found" in err.value.message
