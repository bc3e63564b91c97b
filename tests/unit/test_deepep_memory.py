"""DeepEP's device memory per GPU (simulator/memory/deepep.py): the buffer-size hints of deepseek-ai/DeepEP 567632d
by hand, and what a plan with moe.backend DeepEP adds to the communication libraries' bytes."""

from simulator.hardware.loader import load_cluster
from simulator.memory.deepep import (
    WORKSPACE_BYTES,
    deepep_bytes,
    low_latency_buffer_bytes,
    normal_buffer_bytes,
)
from simulator.memory.nccl import nccl_bytes, plan_communicators
from simulator.model import ModelSpec
from simulator.model.spec import MoESpec
from simulator.plan import moe_backend, resolve_plan
from simulator.units.constants import MiB

MOE = ModelSpec(layers=4, hidden=4096, heads=32, vocab=32000,
                moe=MoESpec(experts=128, top_k=8, expert_ffn_hidden=1536))


def test_normal_mode_hints_by_hand():
    """csrc/config.hpp get_nvl_buffer_size_hint / get_rdma_buffer_size_hint with Buffer.num_sms 20 (10 channels)."""
    per_token = 2 * 4096 + 8 + 128 * 8 + 128 * 4 + 128 * 4            # hidden, source meta, top-k idx/weights, scales
    # EP 8, one node: 10 channels x 8 peers x (2 x 1 + 3) x 4 B + 10 x 8 x 256 tokens x 10,248 B, to 128 B; no RDMA
    nvl = 10 * 8 * 5 * 4 + 10 * 8 * 256 * per_token
    assert normal_buffer_bytes(4096, 8) == (-(-nvl // 128) * 128, 0) == (209_880_704, 0)
    # EP 16: the dispatch config's 288 NVLink tokens; RDMA receive 128 rounded up to a multiple of the 20 sends = 140
    nvl16 = 10 * 8 * (2 * 2 + 3) * 4 + 10 * 8 * 288 * per_token
    rdma16 = 10 * 2 * 18 * 2 * 4 + 2 * 10 * 2 * 140 * (per_token + 16)
    assert normal_buffer_bytes(4096, 16) == (-(-nvl16 // 128) * 128, -(-rdma16 // 128) * 128)
    # hidden 7168 at EP 64 (DeepSeek-V3): 8 RDMA ranks x 128 tokens, both directions
    assert normal_buffer_bytes(7168, 64)[1] == 336_047_360
    # a group size without a DeepEP config takes the next larger one's tokens (12 -> 16's)
    assert normal_buffer_bytes(4096, 12)[0] < normal_buffer_bytes(4096, 16)[0]


def test_low_latency_hint_by_hand():
    """LowLatencyLayout: DeepSeek-V3 decode (128 tokens per rank, hidden 7168, 256 experts): dispatch message 16 +
    2 x 7168 = 14,352 B, combine 56 x 4 + 14,336 = 14,560 B; send and receive 256 x 128 x 14,560 B, twice each."""
    recv = 256 * 128 * 14_560
    total = 2 * recv + 2 * recv + 2 * 1024
    assert low_latency_buffer_bytes(128, 7168, 256) == (total + 128) // 128 * 128 == 1_908_410_496


def test_a_plan_with_deepep():
    """EP 32 over 4 DGX H100 nodes: workspace + NVLink buffer + the RDMA buffer in whole 512 MiB NVSHMEM granules;
    the EP communicator then only runs the Buffer set-up's ring gather, no point-to-point to its 31 peers."""
    cluster = load_cluster("dgx_h100", nodes=4)
    rp = resolve_plan(MOE, {"ep": 32}, {"seq_len": 4096, "micro_batch": 1, "global_batch": 32}, 32)
    nvl, rdma = normal_buffer_bytes(4096, 32)
    assert rdma == 105_109_120
    deep = rp.with_moe_backend(moe_backend("deepep_normal"))
    assert rp.moe_backend.name == "nccl"
    assert deepep_bytes(deep) == WORKSPACE_BYTES + nvl + 512 * MiB
    assert deepep_bytes(rp) == 0
    ep = {p.moe_backend.name: next(c for c in plan_communicators(p, 0, 8) if c.name == "ep") for p in (rp, deep)}
    assert (ep["nccl"].ring, ep["nccl"].peers) == (False, 31)
    assert (ep["deepep_normal"].ring, ep["deepep_normal"].peers) == (True, 0)
    with_deepep = nccl_bytes(deep, cluster, 0)
    assert dict(with_deepep.communicators)["deepep"] == deepep_bytes(deep)
    assert "deepep" not in dict(nccl_bytes(rp, cluster, 0).communicators)
