"""The search resolves a candidate with what it keeps per plan without its micro-batch (docs/search/time_to_answer.md,
round 9): the validated ``parallel:`` config, the batch-free rules' verdict, the offload, and the recipe per sharding
switches. Each kept value must be what the user's path (:func:`simulator.plan.resolve_plan`) computes for the
candidate, in whichever order the candidates come."""

from __future__ import annotations

import typing
from collections import Counter
from pathlib import Path

import pytest

from simulator.errors import UserError
from simulator.memory.offload import check_host_memory
from simulator.plan import resolve_plan
from simulator.plan.config import ParallelPlan, TrainingConfig
from simulator.plan.recipe import resolve_recipe
from simulator.scenario.document import read_document
from simulator.scenario.limits import check_timeline
from simulator.search.evaluate import evaluate_points, plan_key, resolve
from simulator.search.evaluated import OOM_REASON, reason_of
from simulator.search.run import candidates, search_context
from simulator.search.space import INNER, parallel_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small():
    """22B (scenarios/korthikanti_22b.yaml) with its default space narrowed to every sharding, recompute and
    offload choice and micro-batches 1 and 2 at tp 4 and 8 and pp 1, 2 and 4 (global batch 16)."""
    data = read_document(ROOT / "scenarios" / "korthikanti_22b.yaml").data
    data.pop("parallel")
    data["training"] = {**data["training"], "global_batch": 16}
    data["search"] = {"tp": [4, 8], "pp": [1, 2, 4], "vpp": [1, 2], "micro_batch": [1, 2],
                      "schedule": ["1f1b", "zb1p"]}
    points, _ = candidates(search_context(data), 10**6, decide_inner=False)
    return data, points


def _user_path(ctx, point):
    """The plan or the UserError of ``point`` by the path a user's own plan takes (every rule validated again)."""
    training = ctx.fixed.training.model_copy(update={"micro_batch": point["micro_batch"]})
    try:
        plan = resolve_plan(ctx.fixed.model, parallel_of(point, ctx.space), training, point["gpus"],
                            ctx.moe_backend)
        check_timeline(plan)
        if plan.offload.any:
            check_host_memory(plan, ctx.fixed.cluster)
    except UserError as exc:
        return exc
    return plan


def _search_path(ctx, point):
    try:
        return resolve(ctx, point, plan_key(ctx, point))
    except UserError as exc:
        return exc


@pytest.mark.parametrize("order", ["enumerated", "reversed"])
def test_kept_values_equal_the_user_path(small, order):
    """Every candidate: the same plan (every field), recipe and offload, or the same error (message and key path),
    with the keys' first plans at micro-batch 1 (enumerated) or 2 (reversed)."""
    data, points = small
    ctx = search_context(data)
    todo = points if order == "enumerated" else points[::-1]
    passed = rejected = 0
    for point in todo:
        got, want = _search_path(ctx, point), _user_path(ctx, point)
        if isinstance(want, UserError):
            assert isinstance(got, UserError), point
            assert (str(got), got.key_path) == (str(want), want.key_path)
            rejected += 1
            continue
        assert not isinstance(got, UserError), (point, got)
        assert all(getattr(got, f) == getattr(want, f) for f in type(want).model_fields), point
        assert got.parallel.model_fields_set == want.parallel.model_fields_set
        assert (got.recipe, got.offload) == (want.recipe, want.offload), point
        passed += 1
    assert (passed, rejected) == (264, 396)        # both outcomes exercised (the counts of this space of 660)
    assert len({plan_key(ctx, p) for p in points}) < len(points)        # keys are shared by micro-batches


def _other_value(name: str, field) -> object:
    """A valid value of ParallelPlan field ``name`` other than its default."""
    special = {"dp": 2, "recompute_layers": 2, "recompute_modules": ("core_attn", "mlp"), "pipeline_layers": (24, 24),
               "order": "tp-cp-dp-ep-pp", "schedule": "gpipe", "megatron_fsdp": "optim", "selective_ac_option": "op"}
    if name in special:
        return special[name]
    default, annotation = field.default, field.annotation
    if typing.get_origin(annotation) is typing.Literal:
        return next(v for v in typing.get_args(annotation) if v != default)
    return {bool: not default, float: default / 2, int: default + 1}[annotation]


def test_the_recipe_reads_only_the_sharding_switches():
    """:func:`resolve_recipe` reads of ``parallel:`` only zero, distributed_optimizer and megatron_fsdp (what the
    search keys it by): another value of any other field leaves it equal, one of those three changes it."""
    base = ParallelPlan()
    switches = {"zero", "distributed_optimizer", "megatron_fsdp"}
    for training in (TrainingConfig(), TrainingConfig(framework="pytorch", precision="amp_bf16")):
        recipe = resolve_recipe(base, training)
        for name, field in ParallelPlan.model_fields.items():
            other = base.model_copy(update={name: _other_value(name, field)})
            if name in switches:
                assert resolve_recipe(other, training) != recipe, name
            else:
                assert resolve_recipe(other, training) == recipe, name


def test_space_inner_yields_new_dicts_in_product_order(small):
    """:meth:`Space.inner` keeps its combinations: each call yields new dicts, in the product's order."""
    data, _ = small
    space = search_context(data).space
    first = list(space.inner(False))
    first[0]["micro_batch"] = 99
    again = list(space.inner(False))
    assert again[0]["micro_batch"] == space.values["micro_batch"][0]
    assert [tuple(p[k] for k in INNER) for p in again] == [
        (o, f, r, s, b) for o in space.values["tp_comm_overlap"] for f in space.values["offload"]
        for r in space.values["recompute"] for s in space.values["sharding"] for b in space.values["micro_batch"]]
    assert {p["sharding"] for p in space.inner(True)} == {"none"}


@pytest.fixture(scope="module")
def batch_rules(small):
    """``small`` with global batch 6: the micro-batch's rules reject too (micro-batch 2 at dp 2: 6 not divisible by
    4; at dp 1 and pp 2: 3 micro-batches, not a multiple of interleaved 1F1B's pp 2)."""
    data = {**small[0], "training": {**small[0]["training"], "global_batch": 6}}
    points, _ = candidates(search_context(data), 10**6, decide_inner=False)
    return data, points


@pytest.mark.parametrize("order", ["enumerated", "reversed"])
def test_loop_counts_equal_one_by_one_counts(batch_rules, order):
    """Round 10: the candidate loop counts a kept verdict (batch-free rules per key, micro-batch rules per
    (micro-batch, dp, pp, vpp, schedule)) returned, not raised, its reason once per verdict. Its count of every
    rule's reason equals the user path's, candidate by candidate, in either order; every other candidate passed
    the rules (out of memory, or its bound kept)."""
    data, points = batch_rules
    ctx = search_context(data)
    todo = points if order == "enumerated" else points[::-1]
    out = evaluate_points(ctx, todo, lower_only=True)
    want = Counter(reason_of(w) for w in (_user_path(search_context(data), p) for p in todo)
                   if isinstance(w, UserError))
    rules = Counter({r: n for r, n in out.rejected.items() if r != OOM_REASON})
    assert rules == want
    assert any(r.startswith("training.global_batch") for r in want)      # the micro-batch's rules reject some
    assert out.evaluated == len(todo) == sum(want.values()) + out.rejected[OOM_REASON] + len(out.bounds)
