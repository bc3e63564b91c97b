"""The inner rules decided per group before it is formed (simulator/search/inner_rules.py, docs/search/
time_to_answer.md round 11): a member is left out, counted under a rule's reason, exactly when the user's path
(:func:`simulator.plan.resolve_plan`) rejects it with that rule; every member kept passes the switches, the
recompute modules' rule and the micro-batch's rules."""

from __future__ import annotations

from collections import Counter

import pytest

from simulator.errors import UserError
from simulator.model.strict import build
from simulator.plan import resolve_plan
from simulator.plan.config import ParallelPlan
from simulator.plan.rules import check_batch, check_recompute_modules, check_switches, derive_dp
from simulator.search.evaluated import reason_of
from simulator.search.run import candidates, search, search_context
from simulator.search.space import INNER, OUTER, parallel_of

from .spaces import megatron_space, pytorch_space

KEY = (*OUTER, *INNER)


def _user_verdict(ctx, point):
    training = ctx.fixed.training.model_copy(update={"micro_batch": point["micro_batch"]})
    try:
        resolve_plan(ctx.fixed.model, parallel_of(point, ctx.space), training, point["gpus"], ctx.moe_backend)
    except UserError as exc:
        return exc
    return None


def _passes_inner_rules(ctx, point) -> bool:
    training = ctx.fixed.training.model_copy(update={"micro_batch": point["micro_batch"]})
    plan = build(ParallelPlan, parallel_of(point, ctx.space), key_prefix="parallel")
    try:
        check_switches(plan, training)
        check_recompute_modules(ctx.fixed.model, plan)
        check_batch(training, derive_dp(plan, point["gpus"]), plan)
    except UserError:
        return False
    return True


@pytest.mark.parametrize("scenario", [megatron_space, pytorch_space])
def test_left_out_members_are_the_user_paths_rejections(scenario):
    data = scenario()
    every, before = candidates(search_context(data), 10**6, decide_inner=False)
    kept, after = candidates(search_context(data), 10**6)
    kept_keys = {tuple(p[k] for k in KEY) for p in kept}
    assert kept_keys <= {tuple(p[k] for k in KEY) for p in every} and len(kept) < len(every)
    ctx = search_context(data)
    left_out = Counter()
    for point in every:
        if tuple(point[k] for k in KEY) in kept_keys:
            assert _passes_inner_rules(ctx, point), point
        else:
            verdict = _user_verdict(ctx, point)
            assert verdict is not None, point
            left_out[reason_of(verdict)] += 1
    added = Counter(after.rejected)
    added.subtract(before.rejected)
    assert +added == left_out      # the counts the filter added are the user path's reasons of what it left out
    assert after.evaluated == before.evaluated + sum(left_out.values())
    assert any(r.startswith("parallel.optimizer_cpu_offload") for r in left_out)
    if scenario is megatron_space:       # both kinds of inner rule fire
        assert any(r.startswith("training.global_batch") for r in left_out)
        assert any(r.startswith("parallel.cpu_offloading_num_layers") for r in left_out)
    else:
        assert any(r.startswith("parallel.offload_param") for r in left_out)


def test_the_first_plans_do_not_change():
    """A search that decides the inner rules per group keeps the first ten plans (every column) of one that resolves
    every member, and the same count of points."""
    data = megatron_space()
    data["training"] = {**data["training"], "global_batch": 64}
    import simulator.search.run as run

    with_rules = search(data)
    original = run.candidate_groups
    try:
        run.candidate_groups = lambda ctx, max_plans: original(ctx, max_plans, decide_inner=False)
        one_by_one = search(data)
    finally:
        run.candidate_groups = original
    assert with_rules.plans[:10] == one_by_one.plans[:10] and len(with_rules.plans) >= 10
    assert with_rules.evaluated == one_by_one.evaluated
