"""Per-micro-batch cost of each model chunk on each stage: compute, recompute and exposed comm per dimension.

A :class:`Cost` splits a forward or backward of one chunk into ``compute`` (model work), ``recompute`` (what the
recompute mode re-runs), ``exposed`` communication by docs/interface.md dimension and ``host`` (the GPU waiting for an
eager framework to issue the layer's kernels: :mod:`simulator.compute.host`), so the step breakdown is a sum of
these over the critical stage's timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.compute.host import host_wait
from simulator.compute.layer import LayerTime
from simulator.pricing.groups import GroupTimer
from simulator.pricing.moe_layer import MoeLayerTiming, ep_exposed
from simulator.pricing.overlap import coefficients, exposed
from simulator.traffic import DIMS, CommOp

_ZEROS = dict.fromkeys(DIMS, 0.0)


@dataclass
class Cost:
    """Seconds of one forward or backward of a chunk, by part; ``comm`` is the busy time per dim (for traces).

    ``wgrad`` (backward only) is the part of ``compute`` spent in weight-gradient GEMMs (``LayerTime.wgrad_s``,
    GEMMs only: memory-bound kernels and attention stay with the input gradient): what a zero-bubble schedule
    (DualPipe's W, :mod:`simulator.schedule.dual_timeline`) can defer. It is included in ``compute`` and
    ``total``, never added on top.

    ``exposed_intra`` is the part of ``exposed`` whose traffic stays inside the NVLink domain (NVLink, PCIe, host
    memory: :attr:`~simulator.pricing.groups.OpTiming.on_network` false). While the GPU waits for it, a
    data-parallel collective running in the background over the network keeps its NICs busy, so it is part of the
    window such a collective hides behind (:func:`dp_window`)."""

    compute: float = 0.0
    recompute: float = 0.0
    exposed: dict[str, float] = field(default_factory=_ZEROS.copy)
    comm: dict[str, float] = field(default_factory=_ZEROS.copy)
    flops: float = 0.0
    host: float = 0.0
    wgrad: float = 0.0
    exposed_intra: float = 0.0
    issue: float = 0.0
    """host seconds to issue kernels of layers the host runs ahead across (no sync inside them): the chunk turns
    them into ``host`` over its whole forward or backward (:func:`settle_issue`), not layer by layer"""

    @property
    def total(self) -> float:
        return self.compute + self.recompute + sum(self.exposed.values()) + self.host

    def copy(self) -> Cost:
        """An independent copy (its per-dimension dicts too), to add to without touching a shared cost."""
        return Cost(self.compute, self.recompute, dict(self.exposed), dict(self.comm), self.flops, self.host,
                    self.wgrad, self.exposed_intra, self.issue)

    def scaled_compute(self, factor: float) -> Cost:
        """This cost with its compute and recompute seconds x ``factor`` (the slowest GPU's pace; the host wait is
        the host's and is left as it is)."""
        scaled = self.copy()
        scaled.scale_compute(factor)
        return scaled

    def scale_compute(self, factor: float) -> Cost:
        """:meth:`scaled_compute` in place (on a cost nothing else holds); returns this cost."""
        self.compute *= factor
        self.recompute *= factor
        self.wgrad *= factor
        return self

    def expose(self, dim: str, seconds: float, on_network: bool) -> None:
        """Add ``seconds`` of exposed ``dim`` communication, also to ``exposed_intra`` when its traffic stays inside
        the NVLink domain (:attr:`~simulator.pricing.groups.OpTiming.on_network` false)."""
        self.exposed[dim] += seconds
        if not on_network:
            self.exposed_intra += seconds

    def add(self, other: Cost, times: float = 1.0) -> None:
        self.compute += other.compute * times
        self.recompute += other.recompute * times
        self.flops += other.flops * times
        self.host += other.host * times
        self.wgrad += other.wgrad * times
        self.exposed_intra += other.exposed_intra * times
        self.issue += other.issue * times
        exposed, comm, other_exposed, other_comm = self.exposed, self.comm, other.exposed, other.comm
        for d in DIMS:
            exposed[d] += other_exposed[d] * times
            comm[d] += other_comm[d] * times


def _windows(lt: LayerTime, cp: int, phase: str) -> dict[str, float]:
    """Compute each overlap kind may hide behind, for one layer (per call for the CP ring steps)."""
    if phase == "bwd":
        return {"wgrad": lt.wgrad_s, "dgrad": lt.dgrad_s, "attention_bwd": lt.attn_bwd_s / cp,
                "experts": lt.expert_bwd_s, "none": 0.0}
    return {"gemm": lt.fwd_gemm_s, "attention_fwd": lt.attn_fwd_s / cp, "experts": lt.expert_fwd_s, "none": 0.0}


def _comm_cost(ops: list[CommOp], timer: GroupTimer, stage: int, windows: dict[str, float], cost: Cost,
               expert_overlap: str = "sequential") -> None:
    """Add the exposed and busy time of ``ops`` (one layer, one phase) into ``cost``; ops sharing an overlap
    window share it (their times add before the window is subtracted). MoE dispatch/combine (``experts``) follow
    the backend's ``expert_overlap`` (:func:`simulator.pricing.moe_layer.ep_exposed`)."""
    by_window: dict[str, dict[str, float]] = {}
    weighted_k: dict[str, float] = {}               # per window: sum of time x interference of its ops
    intra: dict[str, float] = {}                    # per window: the time of its ops that stay off the network
    for op in ops:
        timing = timer.time(op, stage)
        t, k = timing.call_s, _interference(timing.interference)
        cost.comm[op.dim] += t * op.count
        if op.overlap.startswith("attention"):      # CP ring: each step hides behind one attention block
            cost.expose(op.dim, op.count * exposed(t, windows[op.overlap], k), timing.on_network)
        elif op.overlap == "none" or op.overlap not in windows:
            cost.expose(op.dim, t * op.count, timing.on_network)
        else:
            by_window.setdefault(op.overlap, {}).setdefault(op.dim, 0.0)
            by_window[op.overlap][op.dim] += t * op.count
            weighted_k[op.overlap] = weighted_k.get(op.overlap, 0.0) + t * op.count * k
            intra[op.overlap] = intra.get(op.overlap, 0.0) + (0.0 if timing.on_network else t * op.count)
    for window, per_dim in by_window.items():
        total = sum(per_dim.values())
        out = (ep_exposed(total, windows[window], expert_overlap) if window == "experts"
               else exposed(total, windows[window], weighted_k[window] / total if total > 0 else None))
        for dim, t in per_dim.items():
            cost.exposed[dim] += out * t / total
        cost.exposed_intra += out * intra[window] / total if total > 0 else 0.0


def _interference(k: float | None) -> float:
    """An op's interference (:class:`simulator.pricing.groups.OpTiming`), the engine default when it has none."""
    return coefficients()["overlap_interference"] if k is None else k


def layer_costs(lt: LayerTime, ops: tuple[CommOp, ...], kind: str, recompute: str, cp: int, timer: GroupTimer,
                stage: int, moe: MoeLayerTiming | None = None, modules: frozenset[str] | None = None
                ) -> tuple[Cost, Cost]:
    """(forward, backward) cost of one layer of ``kind`` (dense/moe) for one micro-batch on ``stage``; ``modules``:
    what selective recompute re-runs (default core attention).

    ``moe``: the MoE layer on this stage's EP group (:mod:`simulator.pricing.moe_layer`); its layer time (the
    busiest rank's expert GEMMs) replaces ``lt`` and its backend's overlap prices the EP ops' exposure."""
    mine = [o for o in ops if o.layer in ("any", kind)]
    overlap = "sequential"
    if moe is not None:
        lt, overlap = moe.layer, moe.comm.overlap
    fwd = Cost(compute=lt.fwd_s, flops=lt.fwd_flops)
    _comm_cost([o for o in mine if o.scope == "layer_fwd"], timer, stage, _windows(lt, cp, "fwd"), fwd, overlap)
    bwd = Cost(compute=lt.bwd_s, recompute=lt.recompute_s(recompute, modules), wgrad=lt.wgrad_s,
               flops=lt.bwd_flops + lt.recompute_flops(recompute, modules))
    _comm_cost([o for o in mine if o.scope == "layer_bwd"], timer, stage, _windows(lt, cp, "bwd"), bwd, overlap)
    if recompute != "none":  # a layer that keeps its activations (block recompute) repeats no collective
        _comm_cost([o for o in mine if o.scope == "layer_recompute"], timer, stage, _windows(lt, cp, "fwd"), bwd,
                   overlap)
    # an eager framework: each phase takes at least the host time to issue its kernels (full recompute issues the
    # forward's again inside backward, and the checkpoint wrapper adds its own)
    full = recompute == "full"
    sac = recompute == "selective" and modules is not None and "op_sac" in modules   # op-level SAC's dispatch mode
    host_fwd = lt.host_fwd_s + (lt.host_ckpt_fwd_s if full else 0.0) + (lt.host_sac_fwd_s if sac else 0.0)
    host_bwd = lt.host_bwd_s + (lt.host_fwd_s + lt.host_ckpt_bwd_s if full else 0.0) + (lt.host_sac_bwd_s if sac else 0.0)
    if lt.host_runs_ahead:          # no sync inside the layer: the chunk settles the wait over all its layers
        fwd.issue, bwd.issue = host_fwd, host_bwd
    else:
        fwd.host = host_wait(host_fwd, fwd.total)
        bwd.host = host_wait(host_bwd, bwd.total)
    return fwd, bwd


def settle_issue(cost: Cost) -> None:
    """Turn the host issue time of a chunk's run-ahead layers into the GPU's wait: the chunk's forward (or
    backward) takes at least the host time to issue it, ``max(GPU, host)`` over the whole segment."""
    if cost.issue > 0:
        cost.host += host_wait(cost.issue, cost.total)
        cost.issue = 0.0


def microbatch_dp_cost(ops: tuple[CommOp, ...], timer: GroupTimer, stage: int, share: float, fwd: Cost,
                       bwd: Cost) -> None:
    """ZeRO-2/3 per-micro-batch gathers and reductions of a chunk (``share`` of the stage's parameters),
    overlapped with that chunk's forward or backward compute (FSDP prefetch)."""
    for phase, cost in (("forward", fwd), ("backward", bwd)):
        mine = [o for o in ops if o.scope == "microbatch" and (o.overlap == phase or
                                                                (phase == "backward" and o.overlap == "none"))]
        if not mine:
            continue
        timings = [(o, timer.time(o, stage)) for o in mine]
        hidden = [t.call_s * share for o, t in timings if o.overlap != "none"]
        plain = [t.call_s * share for o, t in timings if o.overlap == "none"]
        k = sum(t.call_s * share * _interference(t.interference) for o, t in timings if o.overlap != "none")
        window = dp_window(cost, all(t.on_network for o, t in timings if o.overlap != "none"))
        cost.comm["dp"] += sum(hidden) + sum(plain)
        cost.exposed["dp"] += exposed(sum(hidden), window, k / sum(hidden) if sum(hidden) > 0 else None) + sum(plain)


def dp_window(cost: Cost, on_network: bool, backward: bool = True) -> float:
    """Seconds of ``cost`` a data-parallel collective in the background hides behind: the compute (+ recompute in a
    backward), and, when the collective crosses the network, also the exposed communication that stays inside the
    NVLink domain (:attr:`Cost.exposed_intra`): its NICs are not the GPU's bottleneck then (Megatron issues the
    gradient reductions and parameter gathers on their own stream, FSDP prefetches the next unit's gather)."""
    return (cost.compute + (cost.recompute if backward else 0.0)
            + (cost.exposed_intra if on_network else 0.0))
