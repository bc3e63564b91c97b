"""The Zero Bubble pipeline schedules ZB-H1 (``zb1p``) and ZB-V (``zbv``) as per-rank op orders, in the op
representation of :mod:`simulator.plan.dualpipe` (:class:`~simulator.plan.dualpipe.DualOp`, built by its
:class:`~simulator.plan.dualpipe.RankOrder`), which :mod:`simulator.schedule.dual_timeline` replays; and the
micro-batches a rank holds at once (:func:`zb_in_flight`).
Also the one home of which schedules are replayed that way (:data:`SPLIT_SCHEDULES`) and which place a V of two
chunks on every rank (:data:`V_SCHEDULES`).

Source: Qi, Wan, Huang, Lin 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), Sec. 2
(handcrafted schedules; Fig. 3 ZB-H1) and Sec. 6 (ZB-V); sail-sg/zero-bubble-pipeline-parallelism (README at
commit 39f2c186: the ZB-H1 quick-start patch of 1F1B). The backward is split: B computes the input gradient (it
is on the critical path and is what the previous stage waits for), W the weight gradient, which any later slot
of the same rank may run (first in first out).

- ``zb1p`` (ZB-H1), pp ranks, one stage each (phase 0 only, forward i -> i+1), rank i of p, m micro-batches:
  (p-i-1) F; i x (F B); (m-p+1) x (F B W); (p-i-1) x (B W); i x W. 1F1B's order with rank i's first i weight
  gradients deferred to its cool-down, where 1F1B idles; the first worker runs as 1F1B (paper Sec. 2.1: the W
  passes start later by the warm-up count, so every rank has p micro-batches in flight, rank 0 none of them
  W-only). Bubble (p-1)(F + B - W) against 1F1B's (p-1)(F + B + W), B + W the full backward (paper Sec. 2.1).
- ``zbv`` (ZB-V), pp ranks, 2 pp stages in a V as DualPipeV: rank i runs stage i (phase 0, forward i -> i+1) and
  stage 2p-1-i (phase 1, forward i -> i-1); the last rank turns phase 0's output into phase 1's input, rank 0
  ends the V (loss). Order (pytorch/pytorch at 1fd7abc ``torch/distributed/pipelining/schedules.py``,
  ``ScheduleZBVZeroBubble._calculate_single_rank_operations``, the order torchtitan's ZBVZeroBubble runs; the
  paper's Sec. 6 V-shape): 2(p-i)-1 F0; i x (F1 F0); (p-i) x (F1 B1 W1); then (F0 while any is left) B0 W0 F1 B1
  W1 until every forward has run; i x (B0 B1); (p-i) x (B0 W0), the W0 of the oldest B0 without one; the
  remaining W1s, then W0s. Zero bubble when F = B = W (paper Sec. 6), 1F1B's activation memory.

An op waits for its input from the neighbouring rank (the forward's activation, the backward's output gradient)
and posts its output when it ends (a send right after the compute that produced it, not batched as DualPipe's);
B posts before its W runs. Assumed, not read from a runtime: the transfer itself is in the chunk costs, as 1F1B's.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.plan.dualpipe import DUAL_SCHEDULES, DualOp, RankOrder, dual_orders

ZB_SCHEDULES = ("zb1p", "zbv")
SPLIT_SCHEDULES = DUAL_SCHEDULES + ZB_SCHEDULES    # orders of F, B, W (and F&B) ops, replayed by dual_timeline
V_SCHEDULES = ("dualpipev", "zbv")                 # two chunks per rank in a V: the model's head on rank 0


def _run(r: RankOrder, kind: str, phase: int = 0) -> None:
    """An F or a split B of ``phase``'s next micro-batch, each receiving its input from and sending its output to
    the neighbouring rank along the phase's direction, or the oldest pending W."""
    if kind == "F":
        r.forward(phase)
    elif kind == "B":
        r.backward(phase, split=True)
    else:
        r.weight()


def _zb1p(pp: int, m: int, i: int) -> list[DualOp]:
    """ZB-H1's order of rank ``i`` (module docstring)."""
    r = RankOrder("zb1p", pp, i)
    steps = ([("F",)] * (pp - i - 1) + [("F", "B")] * i + [("F", "B", "W")] * (m - pp + 1)
             + [("B", "W")] * (pp - i - 1) + [("W",)] * i)
    for step in steps:
        for kind in step:
            _run(r, kind)
    return r.ops


def _zbv(pp: int, m: int, i: int) -> list[DualOp]:
    """ZB-V's order of rank ``i`` (module docstring); phase 0 is the V's first chunk, 1 its second."""
    r = RankOrder("zbv", pp, i)
    for _ in range(2 * (pp - i) - 1):
        _run(r, "F", 0)
    for _ in range(i):
        _run(r, "F", 1)
        _run(r, "F", 0)
    for _ in range(pp - i):
        _run(r, "F", 1)
        _run(r, "B", 1)
        _run(r, "W")
    while r.f[1] < r.f[0] or r.f[0] < m:
        if r.f[0] < m:
            _run(r, "F", 0)
        _run(r, "B", 0)
        _run(r, "W")
        _run(r, "F", 1)
        _run(r, "B", 1)
        _run(r, "W")
    for _ in range(i):
        _run(r, "B", 0)
        _run(r, "B", 1)
    w0 = [w for w in r.zb if w[0] == 0]               # the cool-down's W0 follow their own B0s, oldest first
    w1 = [w for w in r.zb if w[0] == 1]
    r.zb = w0
    for _ in range(pp - i):
        _run(r, "B", 0)
        _run(r, "W")
    r.zb = w1 + r.zb                                  # then the W1s, then the W0s left
    while r.zb:
        _run(r, "W")
    return r.ops


@lru_cache(maxsize=256)
def zb_orders(schedule: str, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
    """The op order of every rank of ``zb1p`` (m >= pp) or ``zbv`` (m >= 2pp - 1), plan rules holding (pp >= 2).
    Cached: callers must not modify them."""
    build = _zb1p if schedule == "zb1p" else _zbv
    orders = tuple(tuple(build(pp, microbatches, i)) for i in range(pp))
    for order in orders:
        if sum(op.kind == "W" for op in order) != sum(op.kind == "B" for op in order):
            raise RuntimeError(f"{schedule} order left a weight gradient behind (internal error)")
    return orders


def split_orders(schedule: str, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
    """The orders of any schedule of :data:`SPLIT_SCHEDULES` (DualPipe's from :func:`dual_orders`)."""
    if schedule in DUAL_SCHEDULES:
        return dual_orders(schedule, pp, microbatches)
    return zb_orders(schedule, pp, microbatches)


def zb_in_flight(schedule: str, pp: int, stage: int, microbatches: int) -> float:
    """Micro-batches of rank ``stage``'s layers (``ResolvedPlan.stage_layers``) whose activations the rank holds
    at once, in closed form (a test checks it against :func:`simulator.plan.pipeline.in_flight_walk`): forwards
    run minus backwards done, a split backward freeing its micro-batch.

    ``zb1p``: 1F1B's min(p - i, m): the same warm-up and the same alternation of F and B (the deferred W changes
    only when a weight gradient runs). ``zbv``: every rank holds 2p chunks at its peak (2p - 1 warm-up forwards,
    then one more before each backward), a chunk half the rank's layers, so p: 1F1B's rank-0 count on every rank
    (paper Sec. 6). Not counted: the inputs and output gradients a deferred W still reads (its GEMMs' operands,
    less than the B's activations: paper Table 1), up to i micro-batches on rank i of zb1p, none on rank 0."""
    if schedule == "zb1p":
        return float(min(pp - stage, microbatches))
    return float(pp)
