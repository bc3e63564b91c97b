"""Two-batch overlap (TBO) of a MoE layer: one micro-batch's dispatch/combine under the other's compute.

SGLang (``--enable-two-batch-overlap``) and DeepSeek's serving system split a step's batch into two micro-batches
and run them interleaved, so that the all-to-all of one hides behind the attention or experts of the other
(deepseek-ai/profile-data README: "we utilize two micro-batches to overlap computation and all-to-all
communication, while ensuring that the attention computation load is balanced across the two micro-batches";
sgl-project/sglang python/sglang/srt/two_batch_overlap.py splits an extend batch at half the summed extend
lengths, a decode batch at half its sequences).

Per MoE layer, micro-batch i (i = 0, 1) has ``a_i`` seconds of compute before its router (attention, the dense
GEMMs, norms, its TP collectives), ``d_i`` of dispatch, ``e_i`` of expert GEMMs and ``c_i`` of combine, each priced at
the half batch (so the smaller GEMMs' lower efficiency and the per-kernel launches count twice). The compute stream
runs a_0, a_1, e_0, e_1 and the communication d_0, d_1, c_0, c_1; in the steady state of a stack of layers each
transfer runs under one compute phase of the other micro-batch:

    d_0 under a_1,   d_1 under e_0,   c_0 under e_1,   c_1 under the next layer's a_0

and the layer takes ``sum over the four pairs of phase(comm, compute)``. A phase whose transfer holds ``k`` of the
GPU's SMs (DeepEP normal kernels: ``reserved_sms``) slows the compute under it by ``s = SMs / (SMs - k)``
(:func:`simulator.moe.sm_slowdown`); then ``phase(x, y) = max(x, y + x (1 - 1/s))``: the compute runs at 1/s speed
while the transfer lasts and at full speed after; with no SMs held (DeepEP low-latency: the RDMA is issued and the SMs
freed, as the profile-data README says of decoding) ``phase = max(x, y)``, i.e. an exposed transfer of
``max(0, x - y)``. The per-pair sum is the steady state; the first layer's d_0 and the last layer's c_1 have no
window (a fill of at most one transfer per step, left out).
"""

from __future__ import annotations

from simulator.plan import Batch


def split_batch(batch: Batch) -> tuple[Batch, Batch] | None:
    """The two micro-batches of ``batch``: half the sequences each (the second gets the odd one), or, for one
    sequence, its new tokens split in two with the second half attending to the first (cached); None when the batch
    is a single token (nothing to split)."""
    if batch.sequences >= 2:
        half = batch.sequences // 2
        return (Batch(half, batch.new, batch.cached), Batch(batch.sequences - half, batch.new, batch.cached))
    if batch.new >= 2:
        half = batch.new // 2
        return Batch(1, half, batch.cached), Batch(1, batch.new - half, batch.cached + half)
    return None


def phase_s(comm_s: float, compute_s: float, slowdown: float = 1.0) -> float:
    """Seconds of a transfer of ``comm_s`` running beside ``compute_s`` of compute that it slows by ``slowdown``
    (>= 1) while it lasts: ``max(x, y + x (1 - 1/s))`` (module docstring)."""
    if slowdown < 1.0:
        raise ValueError(f"an SM slowdown is at least 1, got {slowdown}")
    return max(comm_s, compute_s + comm_s * (1.0 - 1.0 / slowdown))


def tbo_layer_s(attn_s: tuple[float, float], expert_s: tuple[float, float], dispatch_s: tuple[float, float],
                combine_s: tuple[float, float], slowdown: float = 1.0) -> float:
    """Seconds of one MoE layer of two overlapped micro-batches (module docstring): ``attn_s`` (a_0, a_1) the compute
    before the router, ``expert_s`` (e_0, e_1), ``dispatch_s`` (d_0, d_1), ``combine_s`` (c_0, c_1)."""
    (a0, a1), (e0, e1), (d0, d1), (c0, c1) = attn_s, expert_s, dispatch_s, combine_s
    return (phase_s(d0, a1, slowdown) + phase_s(d1, e0, slowdown) + phase_s(c0, e1, slowdown)
            + phase_s(c1, a0, slowdown))
