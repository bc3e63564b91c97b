"""``model.weight_quantization``: a checkpoint's per-module weight format in serving memory and in the decode GEMMs'
weight reads (simulator/model/quantization.py)."""

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.memory.inference import inference_memory
from simulator.plan import Batch
from simulator.program.serving import serving_layer_program
from simulator.scenario import load_scenario
from simulator.serving import backends as B

GPT_OSS = {"format": "mxfp4", "modules": "experts"}


def _scenario(quantization=None, precision="fp4"):
    model = {"preset": "gpt-oss-120b"}
    if quantization is not None:
        model["weight_quantization"] = quantization
    return load_scenario({"name": "q", "system": {"profile": "dgx_h100", "nodes": 1, "gpus": 1}, "model": model,
                          "parallel": {"tp": 1}, "training": {"mode": "inference", "precision": precision},
                          "serving": {"batch": 1, "input_len": 100, "output_len": 10}})


def _weights(scenario) -> dict[str, float]:
    (stage,) = inference_memory(scenario.plan, 80e9).stages
    return {i.name: i.bytes for i in stage.items if i.bucket == "weights"}


def test_gpt_oss_checkpoint_bytes_by_hand():
    # outside the experts, from config.json: embedding and LM head 201088 x 2880 each; per layer q/k/v 2880 x
    # (64 + 2 x 8) x 64 + bias 5120, o 4096 x 2880 + bias 2880, two norms 2 x 2880, router 2880 x 128 + 128;
    # 36 layers and the final norm 2880: all bf16 (2 B)
    per_layer = 2880 * 5120 + 5120 + 4096 * 2880 + 2880 + 2 * 2880 + 2880 * 128 + 128
    dense = 2 * 201088 * 2880 + 36 * per_layer + 2880
    assert dense == 2_127_555_648
    # experts: 36 layers x 128 x (gate_up 2880 x 5760 + bias 5760, down 2880 x 2880 + bias 2880) at MXFP4's
    # 4 bits + one 8-bit scale per 32 = 0.53125 B
    experts = 36 * 128 * (2880 * 5760 + 5760 + 2880 * 2880 + 2880)
    assert experts == 114_701_598_720  # + dense = 116.83e9, the model card's total
    w = _weights(_scenario(GPT_OSS))
    assert w["weights.dense"] == pytest.approx(dense * 2.0, rel=1e-12)
    # the stage's expert count is 940,032 (8e-6) under the architecture's (simulator/plan/params.py stage_params)
    assert w["weights.expert"] == pytest.approx(experts * 0.53125, rel=1e-5)
    total = dense * 2.0 + experts * 0.53125
    assert total == pytest.approx(65.19e9, rel=1e-3)          # 60.7 GiB, the checkpoint's size
    # every weight at the fp4 recipe's NVFP4 0.5625 B, as before: 1.13e9 less than the checkpoint
    old = _weights(_scenario())
    assert sum(old.values()) == pytest.approx((dense + experts) * 0.5625, rel=1e-5)


def test_all_modules_at_nvfp4_is_the_fp4_recipe():
    assert _weights(_scenario({"format": "nvfp4", "modules": "all"})) == _weights(_scenario())
    fp8 = _weights(_scenario({"format": "fp8_block", "modules": "all"}, precision="bf16"))
    assert sum(fp8.values()) == pytest.approx((2_127_555_648 + 114_701_598_720) * (1 + 4 / 16384), rel=1e-5)


def _decode_gemms(scenario):
    rp = scenario.plan
    program = serving_layer_program(rp, Batch(8, 1, 500), "bf16", rp.recipe.gemm_dtype,
                                    layer_index=0, kv_token_bytes=2048.0, kernels=B.KERNEL_SETS["fused"],
                                    decode_kernel=B.ATTENTION_KERNELS["flash_decoding"],
                                    expert_kernel=B.EXPERT_KERNELS["triton_fused"])
    return {g.name: (g.dtype, g.weight_dtype) for g in program.gemms}


def test_decode_gemms_read_each_module_in_its_format():
    # H100: no fp4 tensor cores, the GEMMs compute in bf16; experts read MXFP4 weights (W4A16), attention bf16
    gemms = _decode_gemms(_scenario(GPT_OSS))
    assert gemms["qkv_proj"] == ("bf16", "") and gemms["o_proj"] == ("bf16", "")
    assert gemms["router"] == ("bf16", "")
    assert {v for k, v in gemms.items() if k.startswith("experts.")} == {("bf16", "mxfp4")}
    # without the key every linear weight is read at the recipe's fp4 (NVFP4) bytes, the router in bf16
    before = _decode_gemms(_scenario())
    assert before["qkv_proj"] == ("bf16", "fp4") and before["router"] == ("bf16", "")


def test_bad_weight_format_exits_2_with_file_line_and_key(tmp_path: Path, capsys):
    text = ("name: bad\nsystem: {profile: dgx_h100, nodes: 1, gpus: 1}\nmodel:\n  preset: gpt-oss-120b\n"
            "  weight_quantization:\n    format: int3\n    modules: experts\nparallel: {tp: 1}\n"
            "training: {mode: inference, precision: fp4}\nserving: {batch: 1, input_len: 100, output_len: 10}\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:6: model.weight_quantization.format: Input should be 'mxfp4'" in err and "Traceback" not in err


def test_vllm_start_up_profile_by_hand():
    # vLLM's profile_run: a forward of max_num_batched_tokens 8192 tokens with bf16 activations, live tensors per
    # token 2h + 2 x (top_k x expert width) = 2 x 2880 + 2 x 4 x 2880 = 28800 elements, then the sampler's logits
    # of min(1024, 8192) rows x 201088 x (2 B bf16 + 4 B fp32 copy)
    from simulator.implementation.scheduler import EngineScheduler
    from simulator.serving.scheduler import profile_peak

    config = EngineScheduler(policy="vllm_v1", profile_forward=True, profile_logit_bytes=6)
    kwargs = profile_peak(config, 8192, 1024)
    (stage,) = inference_memory(_scenario(GPT_OSS).plan, 80e9, Batch(1, 8192), **kwargs).stages
    transient = {i.name: i.bytes for i in stage.items if i.bucket == "transient"}
    assert transient["prefill.live_tensors"] == 8192 * 28800 * 2          # 471.9 MB
    assert transient["prefill.logits"] == 1024 * 201088 * 6               # 1235.5 MB
    # without the rule: the step's tensors at the weights' 0.5625 B and one sequence's logits (133 MB in all)
    assert profile_peak(None, 8192, 1024) == {}
    assert profile_peak(EngineScheduler(policy="vllm_v1"), 8192, 1024) == {}
    assert profile_peak(config, 512, 1024)["logit_rows"] == 512


def test_vllm_profile_prices_the_flashinfer_sampler_run_by_hand():
    # (h55b) vLLM 0.10.2's dummy sampler run sets top_k = V - 1 and top_p = 0.9 on every row, so its V1 sampler
    # (FlashInfer importable, VLLM_USE_FLASHINFER_SAMPLER unset: on until vllm-project/vllm#26859) runs
    # top_k_top_p_sampling_from_logits: top_k_mask_logits (a new fp32 tensor) -> softmax (fp32 probabilities) ->
    # top_p_sampling_from_probs, while the bf16 logits (2 B) and the sampler's fp32 copy (4 B) stay live:
    # 2 + 4 + 4 + 4 = 14 B per logit; 1024 x 201088 x 14 = 2,882,797,568 B, 1,647,312,896 B (1.534 GiB) over 6 B
    from simulator.implementation.profiles import profile_named
    from simulator.implementation.scheduler import EngineScheduler
    from simulator.serving.scheduler import profile_peak

    config = EngineScheduler(**dict(profile_named("vllm").serving_defaults)["scheduler"])
    assert config.profile_logit_bytes == 14
    kwargs = profile_peak(config, 8192, 1024)
    (stage,) = inference_memory(_scenario(GPT_OSS).plan, 80e9, Batch(1, 8192), **kwargs).stages
    logits = {i.name: i.bytes for i in stage.items}["prefill.logits"]
    assert logits == 2_882_797_568
    assert (logits - 1024 * 201088 * 6) / 2**30 == pytest.approx(1.534, abs=0.001)


def test_sglang_takes_no_start_up_profile(tmp_path: Path, capsys):
    text = ("name: bad\nsystem: {profile: dgx_h100, nodes: 1, gpus: 1}\nmodel: {preset: gpt-oss-120b}\n"
            "parallel: {tp: 1}\ntraining: {mode: inference, precision: fp4, framework: sglang}\n"
            "serving:\n  batch: 1\n  input_len: 100\n  output_len: 10\n  scheduler:\n    policy: sglang\n"
            "    profile_forward: true\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "serving.scheduler" in err and "sglang reserves by reserved_gib" in err


def test_hf_quantization_config_sets_the_checkpoint_format(tmp_path: Path):
    import json

    from simulator.model.hf_config import load_hf_config

    # gpt-oss-120b's config.json fields that matter here (huggingface.co/openai/gpt-oss-120b)
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
           "num_local_experts": 128, "num_experts_per_tok": 4,
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    q = load_hf_config(path).weight_quantization
    assert (q.format, q.modules, q.dense_bytes, q.expert_bytes) == ("mxfp4", "experts", 2.0, 0.53125)
    # DeepSeek-V3's block-scaled fp8 (weight_block_size [128, 128]), nothing listed unconverted: every weight
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).weight_quantization.model_dump() == {"format": "fp8_block", "modules": "all"}
    # a method the model has no format for (GPTQ int4) leaves it unset
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).weight_quantization is None
