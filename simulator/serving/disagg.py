"""Disaggregated prefill/decode (``serving.disaggregation``): ``prefill_replicas`` of the scenario's DP replicas
only prefill, the others only decode, and each request's K/V cache moves from a prefill GPU to the matching decode
GPU (docs/serving/disaggregation.md).

- K/V transfer: every GPU of the replica sends its shard at once, so the time is one send/recv of the largest
  stage's shard, ``layers_on_stage x input_len x cache bytes per token and layer``, between a GPU of the first
  prefill replica and the same rank of the first decode replica, priced by :mod:`simulator.collectives` on the
  real placement (NVLink inside a node, the NIC across nodes).
- Curve point ``c``: the decode pool holds ``b = c / decode_replicas`` sequences each (at most the KV capacity) and
  decodes without prefill interference, ``tpot = decode(b)``; an unloaded request takes ``ttft = prefill(1) +
  transfer + tpot/2`` (it joins the running batch at the next step). Little's law gives the request rate ``c /
  e2e``; the prefill pool serves at most ``prefill_replicas / prefill(1)`` requests/s, and when that binds the
  requests queue before prefill: the rate is the pool's, ``e2e = c / rate`` and ``ttft = e2e - (output_len - 1)
  tpot``.
"""

from __future__ import annotations

import math

from simulator.memory.inference import kv_cache_bytes_per_token_layer
from simulator.plan import ResolvedPlan
from simulator.pricing.exchange import pair_call
from simulator.serving.step import StepContext


def kv_transfer(ctx: StepContext, rp: ResolvedPlan, prefill_replicas: int) -> dict:
    """Bytes per GPU, seconds and link class of one request's K/V hand-off (module docstring)."""
    per_gpu = max(len(layers) for layers in rp.stage_layers) * ctx.serving.input_len * kv_cache_bytes_per_token_layer(rp)
    dp_group = rp.rank_groups("dp")[0]
    src, dst = dp_group[0], dp_group[prefill_replicas]
    time_s, algorithm, link = pair_call(ctx.topology, src, dst, per_gpu, ctx.calibration)
    return {"bytes_per_gpu": per_gpu, "time_s": time_s, "link": link, "algorithm": algorithm}


def disagg_point(ctx: StepContext, rp: ResolvedPlan, concurrency: int, capacity: int, prefill_one: float, transfer_s: float,
                 decode_s, gpus: int) -> dict:
    """One curve point with separate prefill and decode pools (module docstring); ``decode_s(b)`` prices a decode
    step of ``b`` sequences."""
    s = ctx.serving
    prefill_replicas = s.disaggregation.prefill_replicas
    decode_replicas = rp.dp - prefill_replicas
    b = max(1, math.ceil(concurrency / decode_replicas))
    limited = b > capacity          # capacity >= 1: concurrency_curve refuses a cache that holds no sequence
    b = min(b, capacity)
    tpot = decode_s(b)
    ttft = prefill_one + transfer_s + tpot / 2
    e2e = ttft + (s.output_len - 1) * tpot
    rate = concurrency / e2e
    prefill_rate = prefill_replicas / prefill_one
    prefill_bound = rate > prefill_rate
    if prefill_bound:
        rate = prefill_rate
        e2e = concurrency / rate
        ttft = e2e - (s.output_len - 1) * tpot
    tps = rate * s.output_len
    return {"concurrency": concurrency, "batch_per_replica": b, "kv_limited": limited, "prefill_bound": prefill_bound,
            "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / gpus,
            "tokens_per_s_per_user": 1.0 / tpot}
