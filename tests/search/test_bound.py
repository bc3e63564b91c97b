"""The step's lower bound of a plan timed alone (simulator/search/bound.py, docs/search.md "Pruning by a bound"):
each rank's release (the first micro-batch's forwards on the ranks before it) plus its ops' seconds, checked by
hand and against the replay of the split schedules' orders."""

from __future__ import annotations

import random

import pytest

from simulator.plan.schedules import schedule_named
from simulator.schedule.costs import Cost
from simulator.schedule.dual_timeline import PhaseCosts, phase_costs, run_dual_timeline
from simulator.search.bound import Bound, rank_seconds, releases


def _cost(compute: float, ep: float = 0.0, pp: float = 0.0, wgrad: float = 0.0) -> Cost:
    cost = Cost(compute=compute, wgrad=wgrad)
    cost.exposed["ep"], cost.exposed["pp"] = ep, pp
    return cost


def test_releases_by_hand():
    # ZB-H1 (one phase, forwards 1, 2, 3, 4 s): rank s waits for the forwards of ranks 0..s-1
    zb1p = schedule_named("zb1p")
    assert releases(zb1p, [(1.0,), (2.0,), (3.0,), (4.0,)]) == [0.0, 1.0, 3.0, 6.0]
    # DualPipe: each rank's smaller forward (1, 2, 3), from whichever end is nearer: below 0, 1, 3; above 5, 3, 0
    dualpipe = schedule_named("dualpipe")
    assert releases(dualpipe, [(1.0, 5.0), (2.0, 2.0), (4.0, 3.0)]) == [0.0, 1.0, 0.0]


def test_rank_seconds_by_hand():
    # ZB-V on 2 ranks: a V chunk is half the stage, its pipeline transfer whole. Rank 0's stage: forward 4 s of
    # compute + 1 s of pp transfer, backward 8 s + 1 s: a half-forward 2 + 1 = 3 s; per micro-batch both halves
    # of both: 2 x (3 + 5) = 16 s
    chunks = [[(_cost(4.0, pp=1.0), _cost(8.0, pp=1.0))], [(_cost(2.0), _cost(4.0))]]
    forward, busy = rank_seconds(schedule_named("zbv"), chunks, hide=0.33)
    assert forward == [(3.0,), (1.0,)] and busy == [16.0, 6.0]
    # DualPipe: rank 0 runs stage 0 and stage 1, m/2 each; EP seconds count at (1 - hide) (a pair may hide them)
    chunks = [[(_cost(4.0, ep=1.0), _cost(8.0))], [(_cost(2.0), _cost(4.0, ep=2.0))]]
    forward, busy = rank_seconds(schedule_named("dualpipe"), chunks, hide=0.5)
    assert forward == [(4.5, 2.0), (2.0, 4.5)]
    assert busy == [0.5 * (4.5 + 8.0) + 0.5 * (2.0 + 5.0)] * 2


@pytest.mark.parametrize("name", ["zb1p", "zbv", "dualpipe", "dualpipev"])
def test_the_release_and_busy_bound_every_replayed_rank(name):
    """On random per-stage seconds (EP exposed, pipeline transfers, weight gradients), every rank of the replay
    starts its first op no earlier than its release and ends no earlier than release + m x busy."""
    schedule, rng = schedule_named(name), random.Random(7)
    interference = 0.67
    for pp, m in ((2, 8), (4, 8), (4, 12), (8, 16)):
        for _ in range(3):
            chunks = []
            for _ in range(pp):
                fwd = _cost(rng.uniform(0.5, 2.0), ep=rng.uniform(0.0, 0.4), pp=rng.uniform(0.0, 0.2))
                bwd = _cost(rng.uniform(1.0, 4.0), ep=rng.uniform(0.0, 0.4), pp=rng.uniform(0.0, 0.2))
                bwd.wgrad = rng.uniform(0.1, 0.9) * bwd.compute
                chunks.append([(fwd, bwd)])
            costs = [PhaseCosts.of(p) for p in phase_costs(schedule, chunks)]
            replay = run_dual_timeline(schedule.split_orders(pp, m), costs, interference)
            forward, busy = rank_seconds(schedule, chunks, 1.0 - interference)
            release = releases(schedule, forward)
            for s, tl in enumerate(replay):
                first_start = min(op[3] for op in tl.ops)
                assert first_start >= release[s] * (1 - 1e-12)
                assert tl.end_s >= (release[s] + m * busy[s]) * (1 - 1e-12)


def test_the_bound_prunes_a_plan_that_cannot_win_and_keeps_one_that_can():
    """ZB-H1, 4 ranks, forward 1 s, backward 2 s per micro-batch, m = 8: rank 3 starts after 3 s of forwards and
    then has 8 x 3 = 24 s of work, so no step is shorter than 27 s (compute alone: 24 s). The replay ends every rank
    at 27 s (W fills the rest: the bound is tight here); against a best plan of 26.5 s the plan is pruned, against
    28 s it is kept."""
    schedule = schedule_named("zb1p")
    chunks = [[(_cost(1.0), _cost(2.0, wgrad=1.0))] for _ in range(4)]
    forward, busy = rank_seconds(schedule, chunks, 0.33)
    lower = max(r + 8 * b for r, b in zip(releases(schedule, forward), busy, strict=True))
    assert lower == 27.0
    replay = run_dual_timeline(schedule.split_orders(4, 8), [PhaseCosts.of(p) for p in phase_costs(schedule, chunks)],
                               0.67)
    assert [tl.end_s for tl in replay] == [27.0] * 4
    assert Bound("step_s", False, 26.5).excludes(lower, 1.0, 1)
    assert not Bound("step_s", False, 28.0).excludes(lower, 1.0, 1)
