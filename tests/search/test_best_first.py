"""The one best-first order of a bounded search (simulator/search/best_first.py): parts of batched groups, parts of
split-schedule groups (bounded plan by plan, each plan back on the heap) and plans timed alone, taken best bound
first; the first item the threshold excludes stops the search, and what is left is counted, not timed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.search.best_first import ALONE_WEIGHT, time_best_first
from simulator.search.bound import BOUND_REASON, bound_of
from simulator.search.evaluated import Evaluated
from simulator.search.group_bound import GROUP_REASON, Group
from simulator.search.run import NoPlanFits, search

from .spaces import megatron_space, pytorch_space

STEP = {"a1": 1.2, "a2": 1.5, "s1": 0.7, "c1": 5.5}        # seconds, the fake timing
LOWER = {"s1": 0.6, "s2": 3.0}                                # the split plans' own lower bounds


def _group(schedule: str, lower: float, names: list[str]) -> Group:
    outer = {"gpus": 8, "schedule": schedule}
    points = [{**outer, "name": n, "recompute": "none", "micro_batch": 1, "tp_comm_overlap": False} for n in names]
    return Group(outer, points, lower=lower, tokens=1.0, sub={("none", 1, False): lower})


def test_split_part_first_then_its_plan_and_the_threshold_prunes_the_rest():
    groups = [_group("1f1b", 1.0, ["a1", "a2"]), _group("zbv", 0.5, ["s1", "s2"]), _group("1f1b", 5.0, ["c1"])]
    calls = []

    def run(points, recount=False, bound=None, lower_only=False):
        calls.append(([p["name"] for p in points], recount, lower_only))
        out = Evaluated()
        if lower_only:
            out.evaluated = len(points)
            out.bounds = [(LOWER[p["name"]], 1.0, 8, p) for p in points]
        else:
            out.evaluated = 0 if recount else len(points)
            out.rows = [{"step_s": STEP[p["name"]], "name": p["name"]} for p in points]
        return out

    out = Evaluated()
    time_best_first(out, groups, lambda g: g.outer["schedule"] == "zbv", "step_time", 1, run, bound_of, 2)
    # round 1: the zbv part (bound 0.5) -> its plans' bounds; round 2: plan s1 (0.6, weight 8 fills the round) timed
    # alone -> threshold 0.7; round 3: the 1f1b part's bound 1.0 > 0.7 stops the search
    assert calls == [(["s1", "s2"], False, True), (["s1"], True, False)]
    assert [r["name"] for r in out.rows] == ["s1"]
    assert out.rejected == {GROUP_REASON: 3, BOUND_REASON: 1}       # a1, a2, c1 unresolved; s2 bounded, untimed
    assert out.evaluated == 2 + 3 and ALONE_WEIGHT > 2


def test_without_a_threshold_every_item_is_timed():
    """exact_top 10 with four plans: no threshold ever exists, so every part and plan is timed (a no-fit search
    too evaluates everything)."""
    groups = [_group("1f1b", 1.0, ["a1", "a2"]), _group("zbv", 0.5, ["s1", "s2"]), _group("1f1b", 5.0, ["c1"])]
    timed = []

    def run(points, recount=False, bound=None, lower_only=False):
        out = Evaluated()
        if lower_only:
            out.bounds = [(LOWER[p["name"]], 1.0, 8, p) for p in points]
        else:
            timed.extend(p["name"] for p in points)
            out.rows = [{"step_s": STEP.get(p["name"], 3.5)} for p in points]
        return out

    out = Evaluated()
    time_best_first(out, groups, lambda g: g.outer["schedule"] == "zbv", "step_time", 10, run, bound_of, 64)
    assert sorted(timed) == ["a1", "a2", "c1", "s1", "s2"] and not out.rejected


def test_admit_runs_once_per_reached_key_and_what_it_leaves_out_is_counted_once():
    """``admit`` (the memory bound) runs once per (recompute value, micro-batch) of a group, when its first part is
    taken, with every member of that key, never for a key or group the threshold prunes unreached; the members it
    leaves out are neither timed nor counted again when the rest is pruned."""
    g1 = _group("1f1b", 1.0, ["a1", "a2", "a4"])
    g1.points[2]["tp_comm_overlap"] = True             # a4: the same key (none, 1), another part (bound 1.1)
    g1.sub[("none", 1, True)] = 1.1
    g1.points.append({**g1.points[0], "name": "a3", "micro_batch": 2})       # another key of g1, bound 1.0
    g1.sub[("none", 2, False)] = 1.0
    groups = [g1, _group("zbv", 0.5, ["s1", "s2"]), _group("1f1b", 5.0, ["c1"])]
    admitted, timed = [], []
    out = Evaluated()

    def admit(g, key, members):
        admitted.append((g.points[0]["name"], key, sorted(p["name"] for p in members)))
        gone = {id(p) for p in members if p["name"] in ("a3", "a4")}     # a3 and a4 "out of memory"
        out.rejected["memory bound"] += len(gone)
        out.evaluated += len(gone)
        return gone

    def run(points, recount=False, bound=None, lower_only=False):
        r = Evaluated()
        if lower_only:
            r.evaluated = len(points)
            r.bounds = [(LOWER[p["name"]], 1.0, 8, p) for p in points]
        else:
            timed.extend(p["name"] for p in points)
            r.evaluated = 0 if recount else len(points)
            r.rows = [{"step_s": STEP[p["name"]]} for p in points]
        return r

    time_best_first(out, groups, lambda g: g.outer["schedule"] == "zbv", "step_time", 2, run, bound_of, 2, admit)
    # zbv part -> bounds (its key admitted); s1 (0.6) timed; g1's part (none, 1, False) (a1, a2: 1.0) admits key
    # (none, 1) with a4 too, then (none, 2) (a3: 1.0) is admitted and left empty; a1, a2 timed -> threshold 1.2 s (the
    # 2nd best); a4's part (1.1) is taken with nothing left; s2 (3.0) and c1 (5.0) excluded, c1's key never admitted
    assert admitted == [("s1", ("none", 1), ["s1", "s2"]), ("a1", ("none", 1), ["a1", "a2", "a4"]),
                        ("a1", ("none", 2), ["a3"])]
    assert timed == ["s1", "a1", "a2"]
    assert out.rejected == {"memory bound": 2, BOUND_REASON: 1, GROUP_REASON: 1}     # a3, a4; s2; c1
    assert out.evaluated == 7          # every point once (s1's timing, after its bound, is not a second count)


def test_refine_defers_the_members_whose_bound_it_tightens():
    """A part of a zero1 member (a1, step 1.2 s) and a zero3 one (z1): refine raises z1's bound to 4.0 s, so the
    round times a1 alone; z1 goes back on the heap as a part of its own, and the threshold (1.2 s, exact_top 1)
    then excludes it unresolved. The refined part is not refined again."""
    group = _group("1f1b", 1.0, ["a1", "z1"])
    for p, sharding in zip(group.points, ["zero1", "zero3"], strict=True):
        p["sharding"] = sharding
    timed, asked = [], []

    def run(points, recount=False, bound=None, lower_only=False):
        timed.extend(p["name"] for p in points)
        out = Evaluated()
        out.evaluated = len(points)
        out.rows = [{"step_s": STEP.get(p["name"], 9.0), "name": p["name"]} for p in points]
        return out

    def refine(g, key, shardings):
        asked.append((key, sorted(shardings)))
        return {"zero3": 4.0, "zero1": 0.5}         # zero1's is below the part's 1.0: ignored

    out = Evaluated()
    time_best_first(out, [group], lambda g: False, "step_time", 1, run, bound_of, 64, refine=refine)
    assert timed == ["a1"] and asked == [(("none", 1, False), ["zero1", "zero3"])]
    assert out.rejected == {GROUP_REASON: 1} and out.evaluated == 2


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(framework=st.sampled_from(["megatron", "pytorch"]),
       schedules=st.sets(st.sampled_from(["1f1b", "gpipe", "zb1p", "zbv", "dualpipev"]), min_size=1),
       pp=st.sets(st.sampled_from([1, 2, 4]), min_size=1), micro=st.sets(st.sampled_from([1, 2]), min_size=1),
       batch=st.sampled_from([8, 16, 32]), top=st.sampled_from([1, 3, 5]),
       objective=st.sampled_from(["step_time", "tokens_per_s_per_gpu"]))
def test_the_first_plans_equal_those_of_a_search_that_times_everything(framework, schedules, pp, micro, batch, top,
                                                                       objective):
    """On random small spaces (the 22B model on 32 H100s, every sharding, recompute and offload choice), the
    best-first search's first ``top`` plans (every column) and its points equal those of a search that times every
    plan, and each point is counted once."""
    data = megatron_space() if framework == "megatron" else pytorch_space()
    data["training"] = {**data["training"], "global_batch": batch}
    data["search"] = {**data["search"], "schedule": sorted(schedules), "pp": sorted(pp), "micro_batch": sorted(micro)}
    try:
        every = search(data, exact_top=None, objective=objective)
    except NoPlanFits:
        with pytest.raises(NoPlanFits):
            search(data, exact_top=top, objective=objective)
        return
    bounded = search(data, exact_top=top, objective=objective)
    assert bounded.plans[:top] == every.plans[:top] and bounded.evaluated == every.evaluated
    assert bounded.evaluated == bounded.valid + sum(bounded.rejected.values())


def test_a_plan_timed_alone_is_prepared_once(monkeypatch):
    """A split-schedule plan prepared for its lower bound is not prepared again when the order times it (the
    evaluation keeps its chunk costs and memory, evaluate.keep_bounded): as many step preparations fewer as plans
    timed, the same plans."""
    from simulator.search import evaluate

    data = megatron_space()
    data["search"] = {**data["search"], "schedule": ["zb1p"]}
    calls = []
    real = evaluate.prepare_step
    monkeypatch.setattr(evaluate, "prepare_step", lambda *a, **k: calls.append(1) or real(*a, **k))
    kept = search(data, exact_top=3)
    with_keep = len(calls)
    monkeypatch.setattr(evaluate, "keep_bounded", lambda ctx, item: None)
    again = search(data, exact_top=3)
    assert again.plans == kept.plans and kept.valid > 3
    assert len(calls) - with_keep == with_keep + again.valid
