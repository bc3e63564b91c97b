"""Sliding-window attention in serving (simulator/memory/kv_window.py, simulator/program/serving.py): hand numbers for
gpt-oss-120b (36 layers, the even ones windowed at 128 tokens; 8 K/V heads of 64, a bf16 cache: 2 x 8 x 64 x 2 =
2048 B per token and layer on one GPU) at a 32K context."""

from types import SimpleNamespace

import numpy as np
import pytest

from simulator.errors import UserError
from simulator.memory.inference import inference_memory, kv_cache_bytes_per_token_layer
from simulator.memory.kv_window import kv_window_of
from simulator.plan import Batch
from simulator.program.serving import attended_pairs, cache_attention
from simulator.scenario import load_scenario
from simulator.serving import backends as B
from simulator.serving.kv_capacity import kv_capacity
from simulator.serving.scheduler import Pages, engine_budget_bytes

CONTEXT = 32768


def _scenario(**serving):
    return load_scenario({"system": {"profile": "dgx_h100", "gpus": 1}, "model": {"preset": "gpt-oss-120b"},
                          "training": {"mode": "inference", "precision": "fp4"},
                          "serving": {"batch": 1, "input_len": 32000, "output_len": 768, **serving}})


def test_attended_pairs_by_hand():
    """4 queries from position 1: 1 + 2 + 3 + 4 = 10 pairs causal; windowed at 2: 1 + 2 + 2 + 2 = 7; one decode
    query after 32767 cached tokens sees 128 keys in a 128 window, 32768 without."""
    assert attended_pairs(0, 4, None) == 10
    assert attended_pairs(0, 4, 2) == 7
    assert attended_pairs(3, 2, 4) == 4 + 4           # positions 4 and 5, both capped at 4
    assert attended_pairs(CONTEXT - 1, 1, 128) == 128
    assert attended_pairs(CONTEXT - 1, 1, None) == CONTEXT


def test_decode_reads_only_the_window_on_windowed_layers():
    """Decode at 32768 tokens: a windowed layer reads 128 x 2048 B = 262,144 B; a full one 32768 x 2048 B =
    67,108,864 B; the 36 layers 18 x (262,144 + 67,108,864) = 1,212,678,144 B (the whole context: 2,415,919,104)."""
    rp = _scenario().plan
    kv = kv_cache_bytes_per_token_layer(rp)
    assert kv == 2 * 8 * 64 * 2 == 2048
    batch = Batch(sequences=1, new=1, cached=CONTEXT - 1)
    ops = [cache_attention(rp, batch, kv, B.ATTENTION_KERNELS["flash_decoding"], layer_index=i) for i in range(36)]
    assert ops[0].kv_bytes == 262_144 and ops[1].kv_bytes == 67_108_864
    assert sum(o.kv_bytes for o in ops) == 1_212_678_144
    assert ops[0].flops == 2 * 128 * (64 + 64) * 64    # 128 keys x (q.k + p.v widths) x 64 query heads
    # an HF concat cache attends over every key under a mask
    concat = cache_attention(rp, batch, kv, B.ATTENTION_KERNELS["flash_decoding"], B.KV_CACHES["concat"],
                             layer_index=0)
    assert concat.kv_bytes == 67_108_864


def test_prefill_computes_the_band():
    """A 1024-token prefill chunk on a windowed layer: 128 x 129 / 2 + (1024 - 128) x 128 = 8256 + 114,688 = 122,944
    pairs (the full triangle: 1024 x 1025 / 2 = 524,800); its keys span the whole chunk."""
    rp = _scenario().plan
    op = cache_attention(rp, Batch(1, 1024, 0), 2048, None, layer_index=0)
    assert op.flops == 2 * 122_944 * 128 * 64
    assert cache_attention(rp, Batch(1, 1024, 0), 2048, None, layer_index=1).flops == 2 * 524_800 * 128 * 64
    assert op.kv_bytes == 1024 * 2048


def test_cache_bytes_per_sequence_at_32k():
    """vLLM's hybrid manager (pages of 16): a windowed layer keeps ceil(127 / 16) + 1 = 9 pages = 144 tokens, a full
    one 32768: 18 x (32768 + 144) x 2048 B = 1,213,267,968 B per sequence (every layer full: 36 x 32768 x 2048 =
    2,415,919,104 B)."""
    rp = _scenario().plan
    window = kv_window_of(rp.model, "window", 16)
    assert window.cap_pages == 9 and window.tokens(CONTEXT) == (CONTEXT + 144) / 2
    kv = [i.bytes for i in inference_memory(rp, None, Batch(1, 1, CONTEXT - 1), window).stages[0].items
          if i.name == "kv_cache"]
    assert kv == [1_213_267_968]
    full = [i.bytes for i in inference_memory(rp, None, Batch(1, 1, CONTEXT - 1)).stages[0].items
            if i.name == "kv_cache"]
    assert full == [2_415_919_104]
    assert kv_window_of(rp.model, "full", 16) is None


def test_pages_and_capacity_follow_the_window():
    """In pages of 16 tokens on every layer: a decode step to 32768 tokens (32767 computed) frees the windowed
    layers' pages before token 32767 - 128 + 1 = 32640 (page 2040), leaving 2048 - 2040 = 8: (2048 + 8) / 2 = 1028
    pages (the memory report's bound: 9 pages, unaligned); a prefill chunk of 8192 after 16384 computed holds
    1536 - floor(16257 / 16) = 520 windowed pages: (1536 + 520) / 2 = 1028; the same chunk's first step from 0 holds
    every page: 512. SGLang's two pools (the windowed one 0.8 x the full one) take
    (0.5 + 0.8 x 0.5) x 2048 = 1843.2 pages, and a 16-token sequence 0.9 x max(1, 1 / 0.8) = 1.125 (its windowed
    pool binds)."""
    rp = _scenario().plan
    window = kv_window_of(rp.model, "window", 16)
    pages = Pages(10_000, 16, window)
    assert pages.needed(CONTEXT) == 1028
    assert pages.needed(16384 + 8192, 16384) == 1028
    assert pages.needed(8192, 0) == 512
    assert list(pages.needed(np.array([CONTEXT, 8192]), np.array([CONTEXT - 1, 0]))) == [1028, 512]
    assert Pages(10_000, 16).needed(CONTEXT) == 2048
    # a request's pages: its 8192-token prefill takes 512, its first decode step gives back the windowed layers' old
    # pages: ceil(8193 / 16) = 513 on full layers, 513 - floor((8192 - 127) / 16) = 9 windowed: (513 + 9) / 2 = 261
    r = SimpleNamespace(computed=0, blocks=0)
    assert pages.grow(r, 8192) and r.blocks == pages.used == 512
    r.computed = 8192
    assert pages.grow(r, 8193) and r.blocks == pages.used == 261
    swa = kv_window_of(rp.model, "swa_pool", 16)
    assert float(swa.pages(2048)) == pytest.approx(1843.2)
    assert float(swa.pages(1)) == pytest.approx(1.125)
    # the bytes the cache gets (budget less weights, runtime and transients) over one sequence's cache
    full_mem = inference_memory(rp, 80e9, Batch(1, 1, CONTEXT - 1))
    win_mem = inference_memory(rp, 80e9, Batch(1, 1, CONTEXT - 1), window)
    st = full_mem.stages[0]
    free = engine_budget_bytes(full_mem, 0.9) - (st.peak - 2_415_919_104)
    assert kv_capacity(full_mem, 1, CONTEXT, 16, utilization=0.9) == int(free // 2_415_919_104) >= 1
    assert kv_capacity(win_mem, 1, CONTEXT, 16, utilization=0.9, window=window) == int(free // 1_213_267_968)
    assert int(free // 1_213_267_968) > int(free // 2_415_919_104)


def test_window_cache_needs_a_paged_cache():
    """A windowed rule on HF's concat cache is refused with its key (exit 2 at the CLI)."""
    with pytest.raises(UserError) as err:
        _scenario(sliding_window_cache="window", kv_cache_impl="concat", kernels="hf_eager")
    assert err.value.key_path == "serving.sliding_window_cache"
    with pytest.raises(Exception):   # noqa: B017 - an unknown value is refused by the schema
        _scenario(sliding_window_cache="ring")
