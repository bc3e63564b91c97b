"""DualPipe and DualPipeV by hand: the op orders against the figures of deepseek-ai/DualPipe's README (commit
3da1bbe), the bubble against its formula (PP/2 - 1)(F&B + B - 3W), the activations in flight against its "PP + 1",
the two copies of the parameters, and the plan rules."""

from __future__ import annotations

import pytest

from simulator.errors import UserError
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.plan.params import stage_params
from simulator.plan.pipeline import in_flight, in_flight_walk, split_orders, stage_orders
from simulator.schedule.dual_timeline import PhaseCosts, run_dual_timeline
from simulator.schedule.timeline import run_timeline


def _names(ops) -> list[str]:
    """F0.3 (forward of phase 0, micro-batch 3), B1.0s (split backward), W1.0, F0.7&B1.3 (overlapped pair)."""
    out = []
    for op in ops:
        if op.kind == "FB":
            out.append(f"F{op.phase}.{op.mb}&B{op.b_phase}.{op.b_mb}")
        else:
            out.append(f"{op.kind}{op.phase}.{op.mb}{'s' if op.split else ''}")
    return out


def test_dualpipev_device_0_runs_the_readme_figure():
    """README figure "DualPipeV scheduling for 4 PP ranks (8 PP stages) and 10 micro-batches", device 0, read cell
    by cell: seven forwards of the first chunk, three (B, W, F) of the second, six overlapped pairs, three (B, pair),
    then backwards of the first chunk, each followed by its weight gradient."""
    expected = ([f"F0.{j}" for j in range(7)] + ["F1.0", "B1.0s", "W1.0", "F1.1", "B1.1s", "W1.1", "F1.2", "B1.2s",
                                                 "W1.2", "F1.3"]
                + ["F0.7&B1.3", "F1.4&B0.0", "F0.8&B1.4", "F1.5&B0.1", "F0.9&B1.5", "F1.6&B0.2"]
                + ["B1.6", "F1.7&B0.3", "B1.7", "F1.8&B0.4", "B1.8", "F1.9&B0.5"]
                + ["B1.9", "B0.6s", "W0.6", "B0.7s", "W0.7", "B0.8s", "W0.8", "B0.9s", "W0.9"])
    assert _names(split_orders("dualpipev", 4, 10)[0]) == expected


def test_dualpipev_last_rank_alternates_and_runs_its_first_pair_apart():
    """Device 3 of the same figure: F0 F1 alternate, then forward 4 and backward 0 side by side, not overlapped."""
    got = _names(split_orders("dualpipev", 4, 10)[3])
    assert got[:11] == ["F0.0", "F1.0", "F0.1", "F1.1", "F0.2", "F1.2", "F0.3", "F1.3", "F0.4", "B1.0",
                        "F1.4&B0.0"]


def test_dualpipe_device_0_starts_as_the_readme_figure():
    """README figure "DualPipe scheduling for 8 PP ranks and 20 micro-batches in two directions", device 0: forwards
    0-6 one way, then (F, B, W) of the other direction three times, then a forward and the pair with forward 7."""
    got = _names(split_orders("dualpipe", 8, 20)[0])
    assert got[:18] == ([f"F0.{j}" for j in range(7)] + ["F1.0", "B1.0s", "W1.0", "F1.1", "B1.1s", "W1.1",
                                                         "F1.2", "B1.2s", "W1.2", "F1.3", "F0.7&B1.3"])
    last = _names(split_orders("dualpipe", 8, 20)[7])    # the mirrored rank: the same with the directions swapped
    assert last[:8] == [f"F1.{j}" for j in range(7)] + ["F0.0"]


@pytest.mark.parametrize("schedule,pp", [("dualpipe", 2), ("dualpipe", 4), ("dualpipe", 8), ("dualpipev", 2),
                                         ("dualpipev", 3), ("dualpipev", 4)])
def test_every_chunk_runs_once_and_every_split_backward_gets_its_w(schedule, pp):
    for m in (2 * pp, 2 * pp + 2, 4 * pp):
        per_phase = m // 2 if schedule == "dualpipe" else m
        for ops in split_orders(schedule, pp, m):
            forwards = sorted((o.phase, o.mb) for o in ops if o.kind in ("F", "FB"))
            backwards = sorted([(o.phase, o.mb) for o in ops if o.kind == "B"]
                               + [(o.b_phase, o.b_mb) for o in ops if o.kind == "FB"])
            everything = sorted((ph, j) for ph in (0, 1) for j in range(per_phase))
            assert forwards == everything and backwards == everything
            done = set()
            for o in ops:
                if o.kind == "B" and o.split:
                    done.add((o.phase, o.mb))
                if o.kind == "W":
                    assert (o.phase, o.mb) in done
                    done.remove((o.phase, o.mb))
            assert not done


def _replay(schedule: str, pp: int, m: int, f: float, b: float, w: float, ep: float = 0.0):
    c = PhaseCosts((f, f), (b, b), (w, w), (ep, ep), (ep, ep), (f - ep, f - ep), (b - ep, b - ep))
    timelines = run_dual_timeline(split_orders(schedule, pp, m), [c] * pp, 0.0)
    step = max(t.end_s for t in timelines)
    return step, timelines


@pytest.mark.parametrize("schedule,pp,m", [("dualpipe", 4, 8), ("dualpipe", 8, 20), ("dualpipe", 6, 24),
                                           ("dualpipev", 2, 4), ("dualpipev", 4, 10), ("dualpipev", 5, 12)])
@pytest.mark.parametrize("ep", [0.0, 0.2, 0.5])
def test_bubble_is_the_readme_formula(schedule, pp, m, ep):
    """With F = W = B/2 (the README's picture: equal cells, a full backward two of them) the largest idle time of a
    rank is (PP/2 - 1)(F&B + B - 3W), PP the stages (pp for dualpipe, 2 pp for dualpipev), F&B = F + B - 2 ep when
    each of the pair hides the other's ep seconds: F = 1, B = 2, W = 1, ep 0 gives 2 (PP/2 - 1)."""
    f, b, w = 1.0, 2.0, 1.0
    step, timelines = _replay(schedule, pp, m, f, b, w, ep)
    stages = pp if schedule == "dualpipe" else 2 * pp
    expected = (stages / 2 - 1) * ((f + b - 2 * ep) + b - 3 * w)
    assert max(step - t.busy_s for t in timelines) == pytest.approx(expected, abs=1e-9)


def test_dualpipe_bubble_is_below_1f1b_with_the_same_stages():
    """F = 1, B = 2, W = 0.7: 1F1B's bubble (PP - 1)(F + B) = 21 on 8 stages; DualPipe's replay leaves 7.8."""
    f, b, w = 1.0, 2.0, 0.7
    step, timelines = _replay("dualpipe", 8, 16, f, b, w)
    assert max(step - t.busy_s for t in timelines) == pytest.approx(7.8)
    ref = run_timeline(stage_orders("1f1b", 8, 1, 16), [[f]] * 8, [[b]] * 8, 0.0)
    assert max(t.end_s for t in ref) - 16 * (f + b) == pytest.approx(7 * (f + b))


@pytest.mark.parametrize("schedule,pp", [("dualpipe", 2), ("dualpipe", 4), ("dualpipe", 8), ("dualpipe", 16),
                                         ("dualpipev", 2), ("dualpipev", 3), ("dualpipev", 8), ("dualpipev", 16)])
def test_in_flight_closed_form_equals_the_walk(schedule, pp):
    """README: PP + 1 activations per device. dualpipe pp = 4: 5 stages' worth; dualpipev pp = 4: 9 half-stage
    chunks = 4.5 of the rank's layers."""
    for m in range(2 * pp, 6 * pp + 1, 2):
        for i in range(pp):
            assert in_flight(schedule, pp, 1, i, m) == in_flight_walk(schedule, pp, 1, i, m)
    assert in_flight("dualpipe", 4, 1, 0, 8) == 5.0
    assert in_flight("dualpipev", 4, 1, 3, 8) == 4.5


def test_dualpipe_holds_two_copies_of_the_parameters_and_dualpipev_one():
    """DualPipe rank i: stage i + stage pp-1-i. DualPipeV: one copy, the head (final norm and output layer, 4096 x
    128256 + 4096 for Llama-3-8B) moved from the last rank to rank 0, where the V ends."""
    model = load_model_preset("llama3-8b")
    train = {"global_batch": 64, "micro_batch": 1}
    plans = {s: resolve_plan(model, {"pp": 4, "schedule": s}, train, 8) for s in ("1f1b", "dualpipe", "dualpipev")}
    one = [stage_params(plans["1f1b"], s) for s in range(4)]
    v = [stage_params(plans["dualpipev"], s) for s in range(4)]
    for s in range(4):
        two = stage_params(plans["dualpipe"], s)
        assert two.dense == one[s].dense + one[3 - s].dense
    assert v[1] == one[1] and v[2] == one[2]
    head = 4096 * 128256 + 4096
    assert v[0].dense == one[0].dense + head and v[3].dense == one[3].dense - head
    total = sum(p.dense for p in one)
    assert sum(stage_params(plans["dualpipe"], s).dense for s in range(4)) == 2 * total
    assert sum(p.dense for p in v) == total


@pytest.mark.parametrize("parallel,train,key,words", [
    ({"pp": 1, "schedule": "dualpipev"}, {}, "parallel.pp", "needs a pipeline: pp >= 2, got pp = 1"),
    ({"pp": 3, "schedule": "dualpipe"}, {}, "parallel.pp", "pp must be even, got pp = 3"),
    ({"pp": 4, "vpp": 2, "schedule": "dualpipev"}, {}, "parallel.vpp", "vpp must be 1, got vpp = 2"),
    ({"pp": 4, "schedule": "dualpipe"}, {"global_batch": 6}, "training.global_batch",
     "needs at least 2*pp = 8 micro-batches"),
    ({"pp": 4, "schedule": "dualpipe"}, {"global_batch": 9}, "training.global_batch", "= 9 must be even"),
    ({"pp": 4, "schedule": "dualpipev"}, {"global_batch": 7}, "training.global_batch",
     "needs at least 2*pp = 8 micro-batches; the micro-batch count global_batch (7)"),
])
def test_rules_name_the_key_and_the_rule(parallel, train, key, words):
    model = load_model_preset("llama3-8b")
    world = parallel["pp"]
    with pytest.raises(UserError) as exc:
        resolve_plan(model, parallel, {"micro_batch": 1, "global_batch": 16, **train}, world)
    assert exc.value.key_path == key
    assert words in exc.value.message


def test_dualpipev_with_odd_micro_batches_is_fine():
    rp = resolve_plan(load_model_preset("llama3-8b"), {"pp": 4, "schedule": "dualpipev"},
                      {"micro_batch": 1, "global_batch": 9}, 4)
    assert rp.num_microbatches == 9


def test_dual_schedules_are_for_training():
    with pytest.raises(UserError) as exc:
        resolve_plan(load_model_preset("llama3-8b"), {"pp": 2, "schedule": "dualpipev"},
                     {"global_batch": 8, "mode": "inference"}, 2)
    assert exc.value.key_path == "parallel.schedule" and "training schedule" in exc.value.message
