"""Per-layer communication of tensor, sequence, context, Ulysses and expert parallelism, per micro-batch.

Sources: docs/step_time.md (per-layer TP and SP traffic); Shoeybi et al. 2019 (TP: all-reduce
after the attention and MLP blocks forward, two more in backward); Korthikanti et al. 2023 Sec. 4.2.2 (SP: each
all-reduce becomes reduce-scatter + all-gather; backward re-gathers the sequence-sharded input for the weight
gradient and overlaps it with the data-gradient GEMM); Megatron-LM ``LinearWithGradAccumulationAndAsync
Communication`` (the backward reduction of a column-parallel input gradient overlaps the weight-gradient GEMM);
Megatron-Core ring attention (CP: cp-1 sendrecv steps of the K/V block forward, K/V and dK/dV backward, each
overlapped with one attention block; 2*cp head-tail chunks keep the causal work balanced); DeepSpeed-Ulysses
(Jacobs et al. 2023: all-to-all of Q, K, V before attention and of the output after it); MoE dispatch and combine
all-to-all per MoE layer (Lepikhin et al. 2020, GShard).
"""

from __future__ import annotations

from simulator.model import ModelSpec
from simulator.plan import ResolvedPlan
from simulator.traffic.ops import CommOp


def tp_ops(rp: ResolvedPlan, blocks: int, layer: str) -> list[CommOp]:
    """TP collectives of one layer with ``blocks`` TP regions (2 for attention + dense MLP; for a MoE layer 1, its
    MLP communicating over EP, or 2 when the experts are tensor-parallel: :func:`layer_traffic`)."""
    p = rp.parallel
    if p.tp == 1:
        return []
    size = rp.shape.tokens * rp.model.hidden * rp.recipe.activation
    fwd_overlap = "gemm" if p.tp_comm_overlap else "none"
    mk = lambda op, scope, ov, name, n=blocks: CommOp("tp", "tp", op, size, n, scope, ov, name, layer)  # noqa: E731
    if not p.sp:
        fwd = [mk("all_reduce", "layer_fwd", fwd_overlap, "row-parallel output")]
        bwd = [mk("all_reduce", "layer_bwd", "wgrad", "column-parallel input gradient")]
    else:
        fwd = [mk("all_gather", "layer_fwd", fwd_overlap, "sequence-parallel input gather"),
               mk("reduce_scatter", "layer_fwd", fwd_overlap, "row-parallel output reduce-scatter")]
        bwd = [mk("all_gather", "layer_bwd", fwd_overlap, "output gradient gather"),
               mk("all_gather", "layer_bwd", "dgrad", "input re-gather for weight gradient"),
               mk("reduce_scatter", "layer_bwd", "wgrad", "column-parallel input gradient reduce-scatter")]
    return fwd + bwd + _recompute(rp, fwd)


def _recompute(rp: ResolvedPlan, fwd: list[CommOp], module: str | None = None) -> list[CommOp]:
    """Full recompute repeats the layer's forward collectives inside backward; selective recompute repeats those
    of a recomputed ``module`` (core_attn: the CP exchange; moe: the EP dispatch and combine)."""
    mode = rp.parallel.recompute
    if mode == "full" or (module is not None and module in rp.parallel.recomputed_modules):
        return [CommOp(o.dim, o.group, o.op, o.bytes, o.count, "layer_recompute", o.overlap, o.name, o.layer)
                for o in fwd]
    return []


def cp_ops(rp: ResolvedPlan) -> list[CommOp]:
    """Context parallel K/V exchange of one layer (ring P2P or all-gather), per micro-batch."""
    p, m = rp.parallel, rp.model
    if p.cp == 1:
        return []
    sh = rp.shape
    block = sh.tokens * sh.kv_heads * (m.dhead + m.dhead_v) * rp.recipe.activation
    if p.cp_comm == "p2p":
        fwd = [CommOp("cp", "cp", "sendrecv", block, p.cp - 1, "layer_fwd", "attention_fwd", "K/V ring step", "any")]
        bwd = [CommOp("cp", "cp", "sendrecv", 2 * block, p.cp - 1, "layer_bwd", "attention_bwd",
                      "K/V and dK/dV ring step", "any")]
    else:
        fwd = [CommOp("cp", "cp", "all_gather", block * p.cp, 1, "layer_fwd", "none", "K/V all-gather", "any")]
        bwd = [CommOp("cp", "cp", "all_gather", block * p.cp, 1, "layer_bwd", "none", "K/V re-gather", "any"),
               CommOp("cp", "cp", "reduce_scatter", block * p.cp, 1, "layer_bwd", "none", "dK/dV reduce-scatter",
                      "any")]
    return fwd + bwd + _recompute(rp, fwd, "core_attn")


def ulysses_ops(rp: ResolvedPlan) -> list[CommOp]:
    """Ulysses all-to-all of Q, K, V (sequence- to head-sharded) and of the attention output, per layer."""
    p, m = rp.parallel, rp.model
    if p.ulysses == 1:
        return []
    ab, sh = rp.recipe.activation, rp.shape
    qkv = sh.tokens * (sh.heads_tp * m.dhead + sh.kv_heads_tp * (m.dhead + m.dhead_v)) * ab
    out = sh.tokens * sh.heads_tp * m.dhead_v * ab
    fwd = [CommOp("ulysses", "ulysses", "all_to_all", qkv, 1, "layer_fwd", "none", "Q/K/V all-to-all", "any"),
           CommOp("ulysses", "ulysses", "all_to_all", out, 1, "layer_fwd", "none", "output all-to-all", "any")]
    bwd = [CommOp("ulysses", "ulysses", "all_to_all", out, 1, "layer_bwd", "none", "output gradient all-to-all", "any"),
           CommOp("ulysses", "ulysses", "all_to_all", qkv, 1, "layer_bwd", "none", "dQ/dK/dV all-to-all", "any")]
    return fwd + bwd + _recompute(rp, fwd)


def ep_ops(rp: ResolvedPlan) -> list[CommOp]:
    """Expert-parallel dispatch and combine of one MoE layer: each rank sends its routed token copies (router
    tokens x top_k x hidden at uniform routing); backward sends the gradients the same way. The step engine prices
    them with the MoE backend model (:meth:`simulator.pricing.groups.GroupTimer.time`: routing skew, dispatch
    dtype, DeepEP / NCCL / CPU proxy, IBGDA), and the backend's overlap decides how much hides behind the experts
    (``overlap="experts"``)."""
    p, m = rp.parallel, rp.model
    if p.ep == 1 or m.moe is None:
        return []
    size = rp.shape.norm_tokens * m.moe.top_k * m.hidden * rp.recipe.activation
    mk = lambda scope, name: CommOp("ep", "ep", "all_to_all", size, 1, scope, "experts", name, "moe")  # noqa: E731
    fwd = [mk("layer_fwd", "dispatch"), mk("layer_fwd", "combine")]
    bwd = [mk("layer_bwd", "combine gradient"), mk("layer_bwd", "dispatch gradient")]
    return fwd + bwd + _recompute(rp, fwd, "moe")


def layer_traffic(rp: ResolvedPlan) -> tuple[CommOp, ...]:
    """Every per-layer op of the plan; ``layer`` says whether it applies to dense, MoE or any layers."""
    model: ModelSpec = rp.model
    ops = tp_ops(rp, 2, "dense") if model.moe_layers < model.layers else []
    if model.moe_layers:
        # experts sharded over tensor parallelism (etp > 1) need the whole sequence's tokens: Megatron's token
        # dispatchers all-gather the router's tokens over the TP group before the experts and reduce-scatter their
        # output after (the allgather dispatcher; core_v0.6's only way at EP 1), a second TP region like a dense MLP's
        ops += tp_ops(rp, 2 if rp.parallel.etp > 1 else 1, "moe") + ep_ops(rp)
    return tuple(ops + cp_ops(rp) + ulysses_ops(rp))
