"""Serving memory (training.mode: inference): weights and the KV cache, checked against hand calculations."""

import pytest

from simulator.memory import estimate_memory
from simulator.memory.inference import kv_cache_bytes_per_token_layer
from simulator.model import load_model_preset, param_counts
from simulator.plan import resolve_plan
from simulator.units import GiB, KiB


def plan(name, parallel, world, **training):
    train = {"mode": "inference", "seq_len": 8192, "micro_batch": 32, "global_batch": 32, **training}
    return resolve_plan(load_model_preset(name), parallel, train, world)


def item(stage, name):
    return next(i.bytes for i in stage.items if i.name == name)


def test_llama3_8b_kv_cache_is_128_kib_per_token():
    # 32 layers x 8 K/V heads x 128 dims x 2 (K, V) x 2 B = 128 KiB per token (Llama-3-8B config)
    rp = plan("llama3-8b", {}, 1, micro_batch=64, global_batch=64, seq_len=4096)
    assert kv_cache_bytes_per_token_layer(rp) * 32 == 128 * KiB
    stage = estimate_memory(rp).stages[0]
    assert item(stage, "kv_cache") == pytest.approx(64 * 4096 * 128 * KiB)   # 32 GiB
    assert stage.bucket("gradients") == stage.bucket("optimizer") == stage.bucket("main_params") == 0


def test_llama3_70b_tp8_holds_one_eighth_of_weights_and_cache():
    rp = plan("llama3-70b", {"tp": 8}, 8)
    stage = estimate_memory(rp).stages[0]
    # 80 layers x 32 x 8192 tokens x (8 K/V heads / 8 TP ranks) x 128 x 2 x 2 B = 10 GiB
    assert item(stage, "kv_cache") == pytest.approx(10 * GiB)
    total = param_counts(load_model_preset("llama3-70b"))["total"]
    assert stage.bucket("weights") == pytest.approx(2 * total / 8, rel=0.01)   # embeddings are vocab-parallel too


def test_kv_heads_replicate_when_tp_exceeds_them_and_fp8_halves_the_cache():
    tp16 = kv_cache_bytes_per_token_layer(plan("llama3-70b", {"tp": 16}, 16))
    tp8 = kv_cache_bytes_per_token_layer(plan("llama3-70b", {"tp": 8}, 8))
    assert tp16 == tp8    # one K/V head per rank either way: 16 ranks hold 8 heads twice
    assert kv_cache_bytes_per_token_layer(plan("llama3-70b", {"tp": 8}, 8, kv_cache_dtype="fp8")) == tp8 / 2


def test_mla_caches_the_compressed_latent():
    rp = plan("deepseek-v3", {"ep": 8, "pp": 8, "pipeline_layers": [7, 8, 8, 8, 8, 8, 8, 6]}, 64,
              micro_batch=16, global_batch=128, seq_len=4096)
    m = rp.model.mla
    assert kv_cache_bytes_per_token_layer(rp) == (m.kv_lora_rank + m.qk_rope_head_dim) * 2   # 576 x 2 B


def test_inference_scenario_runs_without_a_step(tmp_path, capsys):
    from simulator.cli import main

    assert main(["run", "scenarios/llama3_70b_serving_h100.yaml"]) == 0
    out = capsys.readouterr().out
    assert "inference: serving memory only" in out
    assert main(["memory", "scenarios/llama3_70b_serving_h100.yaml", "--items"]) == 0
    assert "kv_cache" in capsys.readouterr().out
