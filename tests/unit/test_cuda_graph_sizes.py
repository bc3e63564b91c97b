"""Decode batches outside the engine's captured CUDA-graph sizes run eagerly (serving.cuda_graph_batch_sizes;
TensorRT-LLM's PyTorch backend without padding, docs/engine_kernels/trtllm_1_0.md)."""

import pytest

from simulator.entries.serve import simulate_serving
from simulator.errors import UserError
from simulator.scenario import load_scenario


def scenario(batch: int, **serving) -> dict:
    return {"system": {"profile": "hgx_h200", "gpus": 1}, "model": {"preset": "korthikanti-22b"},
            "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": batch, "input_len": 1024, "output_len": 1, "kernels": "torch_eager", **serving}}


def decode(batch: int, **serving):
    return simulate_serving(load_scenario(scenario(batch, **serving))).decode


def test_a_batch_outside_the_captured_sizes_is_issued_by_the_host():
    """22B GPT (48 layers), plain PyTorch kernel set: 48 x 27 + 4 = 1300 kernels. Captured sizes [1, 2, 4]: batch 3
    is eager, 1300 x 13.3 us = 17.29 ms above its GPU time (15.8 ms: 44 GB of bf16 weights at 0.803 x 4.8 TB/s plus
    launches); batches 2 and 4 replay graphs (GPU time only); without a list every batch is captured."""
    sizes = [1, 2, 4]
    eager = decode(3, cuda_graph_batch_sizes=sizes)
    assert eager.kernels == 1300
    assert eager.step_s == pytest.approx(1300 * 13.3e-6, rel=1e-12)
    assert eager.gpu_s == pytest.approx(15.77e-3, rel=0.01) and eager.breakdown_s["host"] > 0
    for b in (2, 4):
        graph = decode(b, cuda_graph_batch_sizes=sizes)
        assert graph.step_s == graph.gpu_s
    assert decode(3).step_s == eager.gpu_s


def test_a_decode_only_mixed_step_counts_all_its_sequences():
    """vLLM V1 / TensorRT-LLM run a step's parts as one forward: two decode groups of 2 and 1 sequences are a batch
    of 3, eager when 3 is not captured, a graph when it is."""
    from simulator.compute.efficiency import default_efficiency
    from simulator.plan import Batch
    from simulator.serving.step import StepContext, mixed_step_time
    from simulator.topology import topology_of

    parts = (Batch(2, 1, 1024), Batch(1, 1, 1024))
    for sizes, eager in (([1, 2, 4], True), ([1, 3], False)):
        sc = load_scenario(scenario(3, cuda_graph_batch_sizes=sizes))
        gpu = sc.cluster.node.gpu
        ctx = StepContext(model=sc.model, gpu=gpu, eff=default_efficiency(gpu.architecture), serving=sc.serving,
                          moe_settings=sc.moe, topology=topology_of(sc.cluster))
        t = mixed_step_time(ctx, sc.plan, parts)
        assert (t.step_s > t.gpu_s) is eager
        assert t.step_s == pytest.approx(1300 * 13.3e-6 if eager else t.gpu_s, rel=1e-12)


def test_trtllm_profile_captures_its_default_sizes():
    """TensorRT-LLM 1.0 (llm_args.py): CudaGraphConfig max_batch_size 0 -> 128, no padding: 1-31, 32, 64, 128."""
    sc = load_scenario({**scenario(1), "training": {"mode": "inference", "precision": "bf16",
                                                    "framework": "tensorrt_llm"}})
    assert sc.serving.cuda_graph_batch_sizes == tuple(range(1, 33)) + (64, 128)


@pytest.mark.parametrize("sizes", [[], [0, 8]])
def test_bad_capture_sizes_are_a_located_error(sizes):
    with pytest.raises(UserError) as e:
        load_scenario(scenario(1, cuda_graph_batch_sizes=sizes))
    assert "cuda_graph_batch_sizes" in str(e.value)
