"""The evaluators without the replay (GPipe's closed form, 1F1B's closed form around its steady state, interleaved
1F1B's steady-state extrapolation) equal the event replay within 1e-9 relative on random per-stage forward and
backward times, p, m and v; hand-checked ends at 10^5 micro-batches; the interleaved one replays a schedule whose
length does not grow with the micro-batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.schedule.steady as steady
from simulator.plan.pipeline import stage_orders
from simulator.plan.schedules import SCHEDULES
from simulator.schedule.dual_timeline import PhaseCosts, run_dual_timeline
from simulator.schedule.fast_timeline import fast_timelines, level_ends
from simulator.schedule.one_f_one_b_form import one_f_one_b_ends
from simulator.schedule.split_steady import split_timelines
from simulator.schedule.timeline import run_timeline


def _replay_ends(schedule: str, pp: int, vpp: int, m: int, d: np.ndarray) -> np.ndarray:
    return np.array([[t.end_s for t in run_timeline(stage_orders(schedule, pp, vpp, m),
                                                    [list(d[b, i, :, 0]) for i in range(pp)],
                                                    [list(d[b, i, :, 1]) for i in range(pp)], 0.0)]
                     for b in range(d.shape[0])])


@st.composite
def _case(draw):
    schedule = draw(st.sampled_from([n for n, s in SCHEDULES.items() if s.fast and not s.splits_backward]))
    pp = draw(st.integers(1, 10))
    vpp = draw(st.sampled_from([1, 2, 3])) if SCHEDULES[schedule].interleaves and pp > 1 else 1
    m = pp * draw(st.integers(1, 24)) if vpp > 1 else draw(st.integers(1, 90))
    shape = draw(st.sampled_from(["random", "middle alike", "uniform"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.05, 3.0, size=(3, pp, vpp, 2))
    if shape == "middle alike" and pp > 2:     # a real plan's stages: the first and last differ, the rest alike
        d[:, 1:-1] = d[:, 1:2]
    if shape == "uniform":
        d[...] = d[:, :1, :1]
    return schedule, pp, vpp, m, d


@settings(max_examples=150, deadline=None)
@given(_case())
def test_every_fast_evaluator_equals_the_replay(case):
    schedule, pp, vpp, m, d = case
    ref = _replay_ends(schedule, pp, vpp, m, d)
    got = np.array([[t.end_s for t in plan] for plan in fast_timelines(schedule, pp, vpp, m, d)])
    assert np.abs(got - ref).max() <= 1e-9 * np.abs(ref).max()
    if SCHEDULES[schedule].fast == "steady":     # whichever way the dispatch went, the steady evaluator itself
        direct = steady.steady_ends(schedule, pp, vpp, m, d)
        assert np.abs(direct - ref).max() <= 1e-9 * np.abs(ref).max()


def test_one_f_one_b_by_hand():
    """Equal stages, forward 1 s and backward 2 s: 1F1B takes (m + p - 1)(f + b) (Narayanan et al., SC'21, Sec.
    2.2: the bubble is (p - 1)(f + b)), here (100 + 3) x 3 = 309 s on stage 0 at p 4, m 100; stage 3 ends its last
    backward 3 x 2 s earlier (stages 2, 1, 0 each run one more 2 s backward after it)."""
    d = np.zeros((1, 4, 1, 2))
    d[..., 0], d[..., 1] = 1.0, 2.0
    ends = one_f_one_b_ends(100, d)[0]
    assert ends.tolist() == pytest.approx([309.0, 307.0, 305.0, 303.0], rel=1e-12)


def test_one_f_one_b_closed_form_at_a_hundred_thousand_micro_batches():
    """A last stage 1.5x slower than the others sets the pace: its m forward + backward pairs (3 s each) behind
    7 forwards of 1 s, then 7 backwards of 1 s up to stage 0: 7 + 3 m + 7 s at p 8, m 100,000."""
    d = np.ones((1, 8, 1, 2))
    d[0, -1] *= 1.5
    m = 100_000
    ends = one_f_one_b_ends(m, d)[0]
    assert ends[0] == pytest.approx(7.0 + m * 3.0 + 7.0, rel=1e-12)
    assert ends[-1] == pytest.approx(7.0 + m * 3.0, rel=1e-12)


def test_interleaved_replays_a_short_schedule(monkeypatch):
    """The cost is flat in micro-batches: interleaved 1F1B at p 4, v 2 and 4,000 micro-batches replays (by levels)
    only a schedule of 28 = 4 x ceil((p + 6 p) / p) micro-batches, and extrapolates it to the level sweep's ends."""
    seen = []
    real = steady._all_ends
    monkeypatch.setattr(steady, "_all_ends", lambda *a: seen.append(a[3]) or real(*a))
    rng = np.random.default_rng(7)
    d = rng.uniform(0.5, 1.0, size=(2, 4, 2, 2))
    d[:, -1] *= 1.5
    m = 4000
    ends = steady.steady_ends("1f1b", 4, 2, m, d)
    assert seen == [28]
    ref = level_ends("1f1b", 4, 2, m, d)
    assert np.abs(ends - ref).max() <= 1e-12 * ref.max()


def test_simulate_uses_the_steady_state_and_equals_the_replay():
    """``simulate()`` times 1F1B without the replay; the replay (kept for traces) gives the same step within
    1e-9, and the trace still has every op."""
    from simulator import load_scenario, simulate
    from simulator.schedule import simulate_step
    from simulator.topology import topology_of

    scenario = load_scenario({"system": {"profile": "dgx_h100", "nodes": 4}, "model": {"preset": "llama3-8b"},
                              "parallel": {"tp": 8, "pp": 4},
                              "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 64}})
    fast = simulate(scenario).step
    replay = simulate_step(scenario.model, scenario.plan, topology_of(scenario.cluster), replay=True)
    assert not any(t.ops for t in fast.timelines)
    assert fast.step_s == pytest.approx(replay.step_s, rel=1e-9)
    assert fast.bubble_s == pytest.approx(replay.bubble_s, rel=1e-9, abs=1e-12)
    assert [len(t.ops) for t in fast.op_timelines()] == [2 * 64] * 4   # dp 1: 64 micro-batches, a forward and a backward each


@st.composite
def _split_case(draw):
    name = draw(st.sampled_from([n for n, s in SCHEDULES.items() if s.splits_backward and s.fast is not None]))
    schedule = SCHEDULES[name]
    pp = draw(st.sampled_from([2, 4, 6]) if schedule.mirrored else st.integers(2, 7))
    m = schedule.min_microbatches(pp)[0] + draw(st.integers(0, 100))   # up to ~3x the short schedule
    m += m % 2 if schedule.mirrored else 0
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    alike = draw(st.booleans())
    costs = []
    for _ in range(pp):
        f, b = rng.uniform(0.5, 2.0, 2), rng.uniform(1.0, 4.0, 2)
        w, ep_f, ep_b = b * rng.uniform(0.2, 0.6, 2), rng.uniform(0, 0.5, 2), rng.uniform(0, 0.5, 2)
        if not (schedule.mirrored or schedule.v_shape):       # ZB-H1: one phase
            f[1] = b[1] = w[1] = 0.0
        costs.append(PhaseCosts(tuple(f), tuple(b), tuple(w), tuple(ep_f), tuple(ep_b), tuple(0.8 * f),
                                tuple(0.8 * b)))
    if alike and pp > 2:                                        # middle ranks alike, as a real plan's
        costs[1:-1] = [costs[1]] * (pp - 2)
    return schedule, pp, m, costs, draw(st.sampled_from([0.0, 0.3]))


@settings(max_examples=60, deadline=None)
@given(_split_case())
def test_split_schedules_equal_the_replay(case):
    """DualPipe, DualPipeV, ZB-H1 and ZB-V: every rank's end, busy and hidden (overlapped EP) seconds within 1e-9
    of the replay's, on random per-rank F, B, W and EP seconds."""
    schedule, pp, m, costs, interference = case
    ref = run_dual_timeline(schedule.split_orders(pp, m), costs, interference)
    got = split_timelines(schedule, pp, m, costs, interference)
    scale = max(t.end_s for t in ref)
    for a, b in zip(ref, got, strict=True):
        assert abs(a.end_s - b.end_s) <= 1e-9 * scale and abs(a.busy_s - b.busy_s) <= 1e-9 * scale
        assert abs(a.pair_hidden_s - b.pair_hidden_s) <= 1e-9 * scale


def test_zb1p_by_hand_at_ten_thousand_micro_batches():
    """ZB-H1 with F = B = W = 1 s on every rank: (p - 1)(F + B - W) bubble (Qi et al. 2024, Sec. 2.1) on m (F + B
    + W), so the last op ends at 3 m + (p - 1) s; at p 4, m 10,000: 30,003 s on rank 0, as the replay of a
    short schedule extrapolated says."""
    one = PhaseCosts((1.0, 0.0), (2.0, 0.0), (1.0, 0.0), (0.0, 0.0), (0.0, 0.0), (1.0, 0.0), (2.0, 0.0))
    got = split_timelines(SCHEDULES["zb1p"], 4, 10_000, [one] * 4, 0.0)
    assert got[0].end_s == pytest.approx(3 * 10_000 + 3, rel=1e-12)
    assert got[0].busy_s == pytest.approx(3 * 10_000, rel=1e-12)


def test_split_schedule_whose_short_schedule_never_repeats(monkeypatch):
    """ZB-H1, p 8, m 64, the last rank 2% slower (as a plan with the head there): the ranks before it run at their
    own pace until their warm-up slack is spent, longer than the short schedule (22 micro-batches), so no period
    repeats there; the doubled one (44) would hold more than half of m, so the level sweep of m itself runs next
    (no third sweep) and the ends are the replay's bit for bit. A second plan with the same op seconds is the
    first's evaluation (kept by its duration rows)."""
    import simulator.schedule.split_steady as split

    mid = PhaseCosts((1.0, 0.0), (2.0, 0.0), (0.9, 0.0), (0.0, 0.0), (0.0, 0.0), (1.0, 0.0), (2.0, 0.0))
    last = PhaseCosts((1.02, 0.0), (2.04, 0.0), (0.92, 0.0), (0.0, 0.0), (0.0, 0.0), (1.02, 0.0), (2.04, 0.0))
    costs, schedule = [mid] * 7 + [last], SCHEDULES["zb1p"]
    swept, sweep = [], split.all_ends
    monkeypatch.setattr(split, "all_ends", lambda g, table: (swept.append(g.n), sweep(g, table))[1])
    split._rank_timelines.cache_clear()
    got = split_timelines(schedule, 8, 64, costs, 0.0)
    assert swept == [8 * 22 * 3, 8 * 64 * 3]          # F, B and W of every micro-batch on 8 ranks
    ref = run_dual_timeline(schedule.split_orders(8, 64), costs, 0.0)
    assert [t.end_s for t in got] == [t.end_s for t in ref]
    assert [t.busy_s for t in got] == pytest.approx([t.busy_s for t in ref], rel=1e-12)
    assert split_timelines(schedule, 8, 64, list(costs), 0.0) == got and len(swept) == 2
