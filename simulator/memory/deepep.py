"""Device memory DeepEP's buffers hold on each GPU of an expert-parallel group (``moe.backend: deepep_normal`` or
``deepep_low_latency``).

Sizes are DeepEP's (deepseek-ai/DeepEP at 567632d, 2026-02-03, the last version whose ``deep_ep.Buffer`` is the v1
one Megatron-Core drives; the same formulas live on in ``csrc/legacy`` at HEAD), with Megatron-Core's settings
(NVIDIA/Megatron-LM d98e8a6, ``megatron/core/transformer/moe/fused_a2a.py`` ``get_buffer``: one buffer for all MoE
layers, normal mode, sized as the larger of the dispatch and combine configs' hints, ``hidden_bytes = hidden x
max(element size, 2)``, so 2 bytes per element; ``Buffer.num_sms`` 20, Megatron's ``moe_flex_dispatcher_num_sms``
default). What a GPU holds:

* a 32 MiB workspace (``csrc/kernels/configs.cuh`` NUM_WORKSPACE_BYTES), ``cudaMalloc`` in every Buffer;
* normal mode, the NVLink buffer (``cudaMalloc``, shared with the node's peers by IPC handles, which map their memory
  and hold none of their own), ``Config::get_nvl_buffer_size_hint`` in ``csrc/config.hpp``: with C = num_sms / 2
  channels, N = min(ranks, 8) NVLink peers, M = max(ranks / 8, 1) RDMA ranks and T the config's NVLink receive
  tokens, ``align128(C N (2M + 3) 4 + C N T (hidden_bytes + 8 + 128 x 8 + 128 x 4 + 128 x 4))`` (the source meta,
  top-k indices (int64), top-k weights and scales of each token);
* normal mode across nodes (ranks > 8), the RDMA buffer on NVSHMEM's symmetric heap,
  ``Config::get_rdma_buffer_size_hint``: ``align128(C M 18 x 2 x 4 + 2 C M T_r (hidden_bytes + 8 + 1024 + 512 + 512
  + 16))`` with T_r the RDMA receive tokens rounded up to a multiple of the send tokens (the Config constructor);
* low-latency mode, the RDMA buffer ``get_low_latency_rdma_size_hint`` (``LowLatencyLayout``): two send, two
  receive and two signalling buffers for T tokens per rank, E experts and hidden h: dispatch message 16 + max(2h, h +
  4 h/128) bytes, combine message 4 h/128 + 2h; send max(T x dispatch, E T x combine), receive E T x max(both),
  signals align128(4E), total + 128 rounded down to 128;
* NVSHMEM maps its symmetric heap in granules of NVSHMEM_CUMEM_GRANULARITY, which DeepEP's ``buffer.py`` sets to
  2^29 = 512 MiB ("initialization requires at least 256 MiB"), so the RDMA buffer occupies whole 512 MiB granules.

The configs (``deep_ep/buffer.py`` ``get_dispatch_config`` / ``get_combine_config``) exist for 2-160 ranks; another
group size takes the next larger entry (the last beyond 160). Low-latency mode's tokens per rank are the rank's
router tokens of one micro-batch (the buffer must hold them). Not counted: NVSHMEM's own state and IBGDA queue pairs
beyond the granule rounding (DeepEP issue #510 measured ~3.1 GB on a GPU whose low-latency hint is 2.0 GiB), the
NVSHMEM bootstrap, DeepEP v2's ``ElasticBuffer`` (sized differently), and the buffers serving engines allocate
(vLLM 0.33.0: 1 GiB NVLink by ``VLLM_DEEPEP_BUFFER_SIZE_MB``, plus 1 GiB RDMA across nodes in high-throughput mode
or the low-latency hint at ``max_num_batched_tokens``; allocated at model load, after vLLM's memory snapshot, so
they would come out of the K/V cache, docs/serving/outputs.md).
"""

from __future__ import annotations

from simulator.caching import memo
from simulator.plan.resolved import ResolvedPlan
from simulator.units.constants import MiB

# ---- DeepEP's constants (deepseek-ai/DeepEP 567632d) ----------------------------------------------------------
NUM_MAX_NVL_PEERS = 8                       # csrc/kernels/configs.cuh
WORKSPACE_BYTES = 32 * MiB                  # csrc/kernels/configs.cuh NUM_WORKSPACE_BYTES
ALIGNMENT_BYTES = 128                       # csrc/kernels/configs.cuh NUM_BUFFER_ALIGNMENT_BYTES
MAX_TOPK, MAX_SCALES = 128, 128             # csrc/config.hpp kNumMaxTopK, kNumMaxScales
SOURCE_META_BYTES = 8                       # csrc/kernels/internode.cu sizeof(SourceMeta): two ints
TOPK_IDX_BYTES = 8                          # topk_idx_t: int64 (TOPK_IDX_BITS 64)
NUM_SMS = 20                                # deep_ep/buffer.py Buffer.num_sms; Megatron moe_flex_dispatcher_num_sms
NVSHMEM_GRANULE_BYTES = 512 * MiB           # deep_ep/buffer.py NVSHMEM_CUMEM_GRANULARITY = 2 ** 29

#: (NVLink send, NVLink receive, RDMA send, RDMA receive) tokens per channel by EP ranks: deep_ep/buffer.py
DISPATCH_CONFIGS = {2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128), 16: (36, 288, 20, 128),
                    24: (32, 288, 8, 128), 32: (32, 288, 8, 128), 48: (32, 288, 8, 128), 64: (32, 288, 8, 128),
                    96: (20, 480, 12, 128), 128: (20, 560, 12, 128), 144: (32, 720, 12, 128),
                    160: (28, 720, 12, 128)}
COMBINE_CONFIGS = {2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128), 16: (4, 288, 12, 128),
                   24: (1, 288, 8, 128), 32: (1, 288, 8, 128), 48: (1, 288, 8, 128), 64: (1, 288, 8, 128),
                   96: (1, 480, 8, 128), 128: (1, 560, 8, 128), 144: (2, 720, 8, 128), 160: (2, 720, 8, 128)}


def _align(n: int, to: int = ALIGNMENT_BYTES) -> int:
    return -(-n // to) * to


def _config_ranks(ranks: int) -> int:
    """The config table's entry for ``ranks`` (the next larger one where DeepEP has none)."""
    return next((r for r in sorted(DISPATCH_CONFIGS) if r >= ranks), max(DISPATCH_CONFIGS))


def _per_token(hidden_bytes: int) -> int:
    """Bytes of one token in a normal-mode buffer: its hidden, source meta, top-k indices and weights, scales."""
    return hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * TOPK_IDX_BYTES + MAX_TOPK * 4 + MAX_SCALES * 4


def nvl_buffer_bytes(hidden_bytes: int, ranks: int, config: tuple[int, int, int, int], num_sms: int = NUM_SMS
                     ) -> int:
    """``Config::get_nvl_buffer_size_hint`` (module docstring)."""
    channels, nvl, rdma_ranks = num_sms // 2, min(ranks, NUM_MAX_NVL_PEERS), max(ranks // NUM_MAX_NVL_PEERS, 1)
    return _align(channels * nvl * (2 * rdma_ranks + 3) * 4 + channels * nvl * config[1] * _per_token(hidden_bytes))


def rdma_buffer_bytes(hidden_bytes: int, ranks: int, config: tuple[int, int, int, int], num_sms: int = NUM_SMS
                      ) -> int:
    """``Config::get_rdma_buffer_size_hint`` (module docstring); 0 within one node."""
    if ranks <= NUM_MAX_NVL_PEERS:
        return 0
    channels, rdma_ranks = num_sms // 2, ranks // NUM_MAX_NVL_PEERS
    send, recv = config[2], config[3]
    tokens = _align(recv, send)            # the Config constructor rounds the receive tokens up to the sends
    return _align(channels * rdma_ranks * (NUM_MAX_NVL_PEERS * 2 + 2) * 2 * 4
                  + 2 * channels * rdma_ranks * tokens * (_per_token(hidden_bytes) + 16))


@memo(maxsize=256)
def normal_buffer_bytes(hidden: int, ranks: int, num_sms: int = NUM_SMS) -> tuple[int, int]:
    """(NVLink, RDMA) bytes of a normal-mode Buffer as Megatron-Core sizes it: the larger of the dispatch and combine
    configs' hints at 2 bytes per hidden element."""
    key = _config_ranks(ranks)
    configs = (DISPATCH_CONFIGS[key], COMBINE_CONFIGS[key])
    hidden_bytes = 2 * hidden
    return (max(nvl_buffer_bytes(hidden_bytes, ranks, c, num_sms) for c in configs),
            max(rdma_buffer_bytes(hidden_bytes, ranks, c, num_sms) for c in configs))


@memo(maxsize=256)
def low_latency_buffer_bytes(tokens_per_rank: int, hidden: int, experts: int) -> int:
    """``get_low_latency_rdma_size_hint`` (module docstring)."""
    scales = hidden // 128
    dispatch = 16 + max(2 * hidden, hidden + scales * 4)
    combine = scales * 4 + 2 * hidden
    send = max(tokens_per_rank * dispatch, experts * tokens_per_rank * combine)
    recv = experts * tokens_per_rank * max(dispatch, combine)
    total = 2 * send + 2 * recv + 2 * _align(experts * 4)
    return (total + ALIGNMENT_BYTES) // ALIGNMENT_BYTES * ALIGNMENT_BYTES


def deepep_bytes(rp: ResolvedPlan) -> float:
    """DeepEP's device bytes on a GPU of ``rp`` under its MoE backend (``rp.moe_backend.buffers``): 0 for a backend
    without DeepEP's buffers, a dense model or ep 1 (module docstring)."""
    moe, ep, backend = rp.model.moe, rp.parallel.ep, rp.moe_backend
    if moe is None or ep < 2 or not backend.deepep_buffers:
        return 0.0
    if backend.buffer_per_micro_batch:
        nvl, rdma = 0, low_latency_buffer_bytes(max(1, round(rp.shape.norm_tokens)), rp.model.hidden, moe.experts)
    else:
        nvl, rdma = normal_buffer_bytes(rp.model.hidden, ep)
    return float(WORKSPACE_BYTES + nvl + _align(rdma, NVSHMEM_GRANULE_BYTES))
