"""``serving.kv_cache_impl`` and the HF generate kernel sets (simulator/serving/backends.py KV_CACHES, KERNEL_SETS):
hand numbers for the cache's memory ops and attention bytes of HF's DynamicCache (concatenation) and StaticCache
(``repeat_kv`` over the preallocated length), and the host terms of eager and compiled generate."""

import pytest

from simulator.entries.serve import simulate_serving
from simulator.errors import UserError
from simulator.plan import Batch
from simulator.program import serving_layer_program
from simulator.scenario import load_scenario
from simulator.serving import backends as B
from simulator.validation.serving_hf import hf_scenario


def _program(mode, model, batch, prompt, new_tokens=64, cache=None):
    data = hf_scenario(mode, model, batch, prompt, new_tokens)
    if cache:
        data["serving"]["kv_cache_impl"] = cache
    sc = load_scenario(data)
    rp, gpu, s = sc.plan, sc.cluster.node.gpu, sc.serving
    kv = 2 * rp.kv_heads_tp * rp.model.dhead * rp.recipe.kv_cache  # K and V bytes per token and layer
    prog = serving_layer_program(rp, Batch(batch, 1, prompt - 1), rp.gemm_dtype(gpu), rp.weight_dtype(gpu),
                                 layer_index=0, kv_token_bytes=kv, kernels=B.KERNEL_SETS[s.kernels],
                                 decode_kernel=B.ATTENTION_KERNELS[s.attention], expert_kernel=B.EXPERT_KERNELS[
                                     s.expert_kernel], kv_cache=B.KV_CACHES[s.kv_cache_impl],
                                 cache_len=s.input_len + s.output_len)
    return prog, {o.name: o.bytes for o in prog.memops}


def test_concat_cache_copies_the_whole_cache_every_step():
    # Llama-3.2-1B: 8 K/V heads x 64 x 2 (K, V) x 2 B = 2,048 B per token and layer; batch 8, 2047 cached + 1 new
    _, ops = _program("eager", "llama-3.2-1b", 8, 2048)
    assert ops["kv_cache_concat"] == 2 * 8 * 2048 * 2048 == 67_108_864  # read past + new, write past + new
    assert "kv_cache_write" not in ops and "repeat_kv" not in ops
    _, paged = _program("eager", "llama-3.2-1b", 8, 2048, cache="paged")
    assert paged["kv_cache_write"] == 2 * 8 * 2048 == 32_768             # the new slots only


def test_static_cache_expands_kv_over_the_preallocated_length():
    # Qwen2.5-0.5B: 2 K/V heads x 64 x 2 x 2 B = 512 B per token and layer, 14 / 2 = 7 query heads per K/V head;
    # static cache of 512 + 64 = 576 slots, attended whatever is filled
    prog, ops = _program("compiled", "qwen2.5-0.5b", 1, 512)
    assert ops["kv_cache_write"] == 2 * 512                              # index_copy_ of one token
    assert ops["repeat_kv"] == (1 + 7) * 576 * 512 == 2_359_296          # read 576 slots, write 7 copies
    att = prog.attention
    assert att.kv_bytes == 7 * 576 * 512 == 2_064_384 and att.seq_len == 576
    assert att.kv_cap_Bps == pytest.approx(14 * B.ATTENTION_KERNELS["torch_sdpa"].per_cta_Bps)  # one CTA per q head
    assert att.flops == pytest.approx(2 * 576 * (64 + 64) * 14)


def test_eager_generate_is_host_bound_at_kernels_times_host_launch():
    # Llama-3.2-1B: 16 layers x 42 + 39 = 711 kernels per token, each 17.97 us of host time: 12.78 ms
    res = simulate_serving(load_scenario(hf_scenario("eager", "llama-3.2-1b", 1, 512, 1)))
    assert res.decode.kernels == 711
    assert res.decode.step_s == pytest.approx(711 * 17.97e-6, rel=1e-9) == pytest.approx(12.777e-3, rel=1e-3)
    assert res.decode.gpu_s < 0.25 * res.decode.step_s


def test_compiled_generate_adds_its_step_host_time_to_the_graph():
    res = simulate_serving(load_scenario(hf_scenario("compiled", "qwen2.5-0.5b", 1, 512, 1)))
    assert res.decode.kernels == 24 * 19 + 35
    assert res.decode.step_s == pytest.approx(res.decode.gpu_s + 2.05e-3, rel=1e-12)
    assert res.decode.breakdown_s["host"] == pytest.approx(2.05e-3)


@pytest.mark.parametrize(("kernels", "graphs"), [("hf_eager", True), ("hf_compiled", False)])
def test_cuda_graphs_against_the_hf_kernel_set_is_a_located_error(kernels, graphs):
    data = hf_scenario("eager", "llama-3.2-1b", 1, 512)
    data["serving"].update(kernels=kernels, cuda_graphs=graphs)
    with pytest.raises(UserError, match="serving.cuda_graphs"):
        load_scenario(data)


@pytest.mark.parametrize(("kernels", "graphs"), [("hf_eager", False), ("hf_compiled", True)])
def test_left_out_cuda_graphs_follows_the_hf_kernel_set(kernels, graphs):
    data = hf_scenario("eager", "llama-3.2-1b", 1, 512)
    data["serving"]["kernels"] = kernels
    assert load_scenario(data).serving.cuda_graphs is graphs
    data["serving"]["cuda_graphs"] = graphs
    assert load_scenario(data).serving.cuda_graphs is graphs


def test_unknown_cache_impl_is_a_located_error():
    data = hf_scenario("eager", "llama-3.2-1b", 1, 512)
    data["serving"]["kv_cache_impl"] = "ring"
    with pytest.raises(UserError, match="serving.kv_cache_impl"):
        load_scenario(data)
