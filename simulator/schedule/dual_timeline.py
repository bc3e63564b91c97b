"""The event timeline of the schedules that split the backward (replay kind "split",
:meth:`simulator.plan.schedules.Schedule.split_orders`): DualPipe and DualPipeV
(:func:`simulator.plan.dualpipe.dual_orders`), ZB-H1 and ZB-V (:mod:`simulator.plan.schedules.zb1p`, ``zbv``),
beside :mod:`simulator.schedule.timeline` (the schedules of whole
backwards), which it leaves as it is. ZB-H1 and ZB-V run no F&B pairs; ZB-H1 has one phase (its phase 1 is empty),
ZB-V two, costed as DualPipeV's (the same V placement).

Ops and their seconds, per rank and phase (deepseek-ai/DualPipe at 3da1bbea53606543d7f5f232338fc58096db30e3):
- F: the phase's forward ``Cost.total``;
- B: the full backward's ``Cost.total``; a split B (zero bubble) leaves out its weight-gradient GEMMs
  (``Cost.wgrad``), which run later as W (their ``wgrad`` seconds);
- F&B, a forward and a backward of other micro-batches run as one overlapped pair: the computes run one after the
  other (they share the SMs), and each one's exposed EP dispatch/combine hides behind the other's compute, as
  DeepSeek-V3 overlaps them (Technical Report Sec. 3.2.1). Pair seconds = F + B - hidden,
  hidden = (min(ep_F, compute_B) + min(ep_B, compute_F)) x (1 - interference), with the engine's overlap
  interference (``overlap_interference`` of data/overlap.yaml, as :class:`~simulator.schedule.timeline.PairHiding`).
  The pipeline sends and receives are not hidden: the repository waits for them before each compute.
An op starts when its rank is free and every receive it waits for has been posted (an output is posted when the
op after which the sender posts it ends); the boundary sendrecv's seconds are in the chunk costs already (as for
1F1B, ``p2p_s`` 0).

Per rank and phase costs from the plan's per-stage chunk costs (:func:`phase_costs`): DualPipe (``mirrored``) rank i
runs stage i (phase 0) and stage pp-1-i (phase 1), each on m/2 micro-batches; ZB-H1 rank i runs stage i (phase 0)
on all m micro-batches; DualPipeV and ZB-V (``v_shape``) split rank i's layers
into two halves run by all m micro-batches, each half half of the stage's compute, recompute, host wait, FLOPs and
non-pipeline communication, with the stage's full pipeline transfers (a V chunk sends and receives as much as a
1F1B stage). The plan keeps its contiguous split of the layers (rank i holds ``stage_layers[i]``) and puts
DualPipeV's output head, loss and MTP modules on rank 0 beside the embedding, where its V ends
(``ResolvedPlan.last_stage_rank``); each V chunk takes half of everything the rank computes, so the embedding and
the head are spread over both.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.plan.dualpipe import DualOp
from simulator.plan.schedules import Schedule
from simulator.schedule.costs import Cost
from simulator.schedule.timeline import StageTimeline, run_in_turn


@dataclass(frozen=True)
class PhaseCosts:
    """One rank's seconds per phase (index 0, 1): forward, full backward, its weight-gradient GEMMs, and for the
    overlapped pairs the exposed EP seconds and the compute (+ recompute) seconds of a forward and a backward."""

    f: tuple[float, float]
    b: tuple[float, float]
    w: tuple[float, float]
    ep_f: tuple[float, float]
    ep_b: tuple[float, float]
    comp_f: tuple[float, float]
    comp_b: tuple[float, float]

    @classmethod
    def of(cls, phases: tuple[tuple[Cost, Cost], tuple[Cost, Cost]]) -> PhaseCosts:
        f, b = [fc for fc, _ in phases], [bc for _, bc in phases]
        return cls(tuple(c.total for c in f), tuple(c.total for c in b), tuple(c.wgrad for c in b),
                   tuple(c.exposed["ep"] for c in f), tuple(c.exposed["ep"] for c in b),
                   tuple(c.compute for c in f), tuple(c.compute + c.recompute for c in b))

    def pair_saving(self, fp: int, bp: int, interference: float) -> float:
        """Seconds an overlapped pair (forward of phase ``fp``, backward of ``bp``) saves (module docstring)."""
        hidden = min(self.ep_f[fp], self.comp_b[bp]) + min(self.ep_b[bp], self.comp_f[fp])
        return hidden * (1.0 - interference)


def _half(cost: Cost) -> Cost:
    """Half a stage's chunk: every part halved but the pipeline transfers (a V chunk sends and receives in full)."""
    out = Cost(cost.compute / 2, cost.recompute / 2, {d: v / 2 for d, v in cost.exposed.items()},
               {d: v / 2 for d, v in cost.comm.items()}, cost.flops / 2, cost.host / 2, cost.wgrad / 2,
               cost.exposed_intra / 2)
    out.exposed["pp"], out.comm["pp"] = cost.exposed["pp"], cost.comm["pp"]
    return out


def half_total(cost: Cost) -> float:
    """``_half(cost).total`` without building it: half of everything but the pipeline transfers."""
    pp = cost.exposed["pp"]
    return (cost.total - pp) / 2 + pp


def phase_costs(schedule: Schedule, chunks: list[list[tuple[Cost, Cost]]]
                ) -> list[tuple[tuple[Cost, Cost], tuple[Cost, Cost]]]:
    """Per rank, the (forward, backward) Cost of one micro-batch in phase 0 and in phase 1 (module docstring), from
    the plan's per-stage chunk costs (one chunk per stage: vpp is 1)."""
    pp = len(chunks)
    if schedule.mirrored:                   # DualPipe: the rank's stage of each copy
        return [(chunks[i][0], chunks[pp - 1 - i][0]) for i in range(pp)]
    seen: dict[int, tuple] = {}             # stages that share their chunk costs (one signature) share these
    for c in chunks:
        if id(c) not in seen:
            if not schedule.v_shape:        # ZB-H1: 1F1B's stages, no second phase
                seen[id(c)] = (c[0], (Cost(), Cost()))
            else:
                half = (_half(c[0][0]), _half(c[0][1]))
                seen[id(c)] = (half, half)
    return [seen[id(c)] for c in chunks]


def phase_seconds(schedule: Schedule, chunks: list[list[tuple[Cost, Cost]]]) -> list[PhaseCosts]:
    """:class:`PhaseCosts` of every rank (:func:`phase_costs`), once per distinct rank."""
    seen: dict[int, PhaseCosts] = {}
    out = []
    for ph in phase_costs(schedule, chunks):
        if id(ph) not in seen:
            seen[id(ph)] = PhaseCosts.of(ph)
        out.append(seen[id(ph)])
    return out


def rank_costs(schedule: Schedule, phases: list[tuple[tuple[Cost, Cost], tuple[Cost, Cost]]]
               ) -> list[list[tuple[Cost, Cost]]]:
    """Per rank, one (forward, backward) Cost per micro-batch of the step, as the step's breakdown counts them:
    m of these are the rank's work. A mirrored schedule (DualPipe): the mean of its two phases (m/2 micro-batches
    each); a V (DualPipeV, ZB-V): their sum (every micro-batch runs both); ZB-H1: its one phase (the empty second
    adds nothing)."""
    weight = 0.5 if schedule.mirrored else 1.0
    out = []
    for phase in phases:
        f, b = Cost(), Cost()
        for fc, bc in phase:
            f.add(fc, weight)
            b.add(bc, weight)
        out.append([(f, b)])
    return out


def _duration(op: DualOp, c: PhaseCosts, interference: float) -> tuple[float, float]:
    """(seconds, pair saving) of one op."""
    if op.kind == "F":
        return c.f[op.phase], 0.0
    if op.kind == "W":
        return c.w[op.phase], 0.0
    if op.kind == "B":
        return c.b[op.phase] - (c.w[op.phase] if op.split else 0.0), 0.0
    save = c.pair_saving(op.phase, op.b_phase, interference)
    return c.f[op.phase] + c.b[op.b_phase] - save, save


def _events(op: DualOp, c: PhaseCosts, begin: float, end: float) -> list[tuple[str, int, int, float, float]]:
    """Trace rows (kind, micro-batch, phase, start, end); a pair is drawn as its forward then its backward, in
    proportion to their seconds."""
    if op.kind != "FB":
        return [(op.kind, op.mb, op.phase, begin, end)]
    f, b = c.f[op.phase], c.b[op.b_phase]
    mid = begin + (end - begin) * (f / (f + b) if f + b > 0 else 0.5)
    return [("F", op.mb, op.phase, begin, mid), ("B", op.b_mb, op.b_phase, mid, end)]


def run_dual_timeline(orders: tuple[tuple[DualOp, ...], ...], costs: list[PhaseCosts], interference: float
                      ) -> list[StageTimeline]:
    """Replay the ranks' orders (module docstring); one :class:`StageTimeline` per rank, its ``pair_hidden_s`` the
    EP seconds its overlapped pairs hid."""
    pp = len(orders)
    posted: dict[tuple[int, str, int, int], float] = {}
    free = [0.0] * pp
    events: list[list] = [[] for _ in range(pp)]
    wait, busy, hidden = [0.0] * pp, [0.0] * pp, [0.0] * pp

    def advance(i: int, k: int) -> int:
        order, t = orders[i], free[i]
        while k < len(order):
            op = order[k]
            if any(w not in posted for w in op.waits):
                break
            begin = max([t, *(posted[w] for w in op.waits)])
            dur, save = _duration(op, costs[i], interference)
            wait[i] += begin - t
            t = begin + dur
            for key in op.posts:
                posted[(i, *key)] = t
            events[i] += _events(op, costs[i], begin, t)
            busy[i] += dur
            hidden[i] += save
            k += 1
        free[i] = t
        return k

    run_in_turn([len(o) for o in orders], advance, "dual pipeline schedule")
    return [StageTimeline(tuple(events[i]), free[i], busy[i], wait[i], 0.0, hidden[i]) for i in range(pp)]

