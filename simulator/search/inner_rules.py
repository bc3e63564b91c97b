"""The plan rules that read the inner knobs, decided for a whole group at once before it is formed
(docs/search/time_to_answer.md, round 11).

A group's members differ only in the inner knobs (:data:`simulator.search.space.INNER`: TP overlap, offload,
recompute, sharding, micro-batch). When the group's representative (its first member) passes every rule but the
micro-batch's (:func:`simulator.plan.resolve.batch_free_rules`), a member's verdict is the first failure of:

1. :func:`~simulator.plan.rules.check_switches` and :func:`~simulator.plan.rules.check_recompute_modules`, a
   function of (pp, offload, recompute, sharding): their branches that read an inner knob read of the outer point
   only pp (activation offload needs pp = 1); every other branch reads only outer values, shared ``parallel:``
   keys and the training, so it passes for the member as it did for the representative. No rule reads the TP
   overlap (only the layer's pricing) nor, before :func:`~simulator.plan.rules.check_batch`, the micro-batch;
2. the rules between them and the micro-batch's (parse_order, derive_dp, check_heads, check_model_switches,
   check_sequence, check_moe) read only outer values, shared keys and the training: they pass, as for the
   representative;
3. :func:`~simulator.plan.rules.check_batch`, a function of (micro-batch, dp, pp, vpp, schedule) (round 10).

So the search keeps, per (pp, collapse flags), which inner combinations pass the first two and how many each of
their rejections rejects, and per (micro-batch, dp, pp, vpp, schedule) the micro-batch's verdict
(:func:`inner_verdicts`); the rejected members are counted under the rule's reason without a point, a
``parallel:`` config or a group slot, and only the others become the group's members.
``tests/search/test_inner_rules.py`` checks the verdicts candidate by candidate against the user's path
(:func:`simulator.plan.resolve_plan`) on spaces with every offload, recompute and sharding choice.

A group whose representative a batch-free rule rejects (not a structural one: those reject the whole outer point,
:data:`simulator.search.run.STRUCTURAL`) keeps every member, resolved one by one as before.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from simulator.errors import UserError
from simulator.model.strict import build
from simulator.plan.config import ParallelPlan
from simulator.plan.rules import check_recompute_modules, check_switches
from simulator.search.resolving import batch_verdict, training_of
from simulator.search.space import parallel_of

if TYPE_CHECKING:
    from simulator.search.evaluate import Context


def inner_verdicts(ctx: Context, outer: dict[str, Any], parallel: ParallelPlan, dp: int,
                   flags: tuple[bool, bool]) -> tuple[tuple[tuple, ...], list[tuple[UserError, int]]]:
    """(the inner combinations of :meth:`~simulator.search.space.Space.members` with ``flags`` that pass every
    rule, each a tuple in :data:`~simulator.search.space.INNER`'s order and in its order; each rejection with the
    number of combinations it rejects) of the members of ``outer``, whose representative's validated config is
    ``parallel`` and passed every batch-free rule with ``dp`` (module docstring)."""
    ordered, by_mb, rejected = _switch_table(ctx, outer, flags)
    refused = []
    for mb, n in by_mb.items():
        batch = (mb, dp, parallel.pp, parallel.vpp, parallel.schedule)
        if (verdict := ctx.batches.get(batch)) is None:
            verdict = batch_verdict(ctx, batch, training_of(ctx, mb), parallel)
        if isinstance(verdict, UserError):
            refused.append(mb)
            rejected = [*rejected, (verdict, n)]
    if refused:
        return tuple(c for c in ordered if c[-1] not in refused), rejected
    return ordered, rejected


def _switch_table(ctx: Context, outer: dict[str, Any], flags: tuple[bool, bool]
                  ) -> tuple[tuple[tuple, ...], dict[int, int], list[tuple[UserError, int]]]:
    """The inner combinations with ``flags`` that pass :func:`_switches` on ``outer``'s pp (in the enumeration's
    order), how many of them have each micro-batch, and each rejection with its count; kept per (pp, flags)."""
    key = (outer["pp"], flags)
    if (got := ctx.inner.get(key)) is not None:
        return got
    ordered = []
    rejected: Counter = Counter()
    for combo in ctx.space.combos(*flags):
        verdict = _switches(ctx, outer, combo)
        if verdict is None:
            ordered.append(combo)
        else:
            rejected[verdict] += 1
    got = ctx.inner[key] = (tuple(ordered), Counter(c[-1] for c in ordered), list(rejected.items()))
    return got


def _switches(ctx: Context, outer: dict[str, Any], combo: tuple) -> UserError | None:
    """The verdict of :func:`check_switches` and :func:`check_recompute_modules` on the member ``combo`` of
    ``outer``: kept per (pp, offload, recompute, sharding), all they read of a point whose outer values passed them
    (module docstring)."""
    _, offload, recompute, sharding, mb = combo
    key = (outer["pp"], offload, recompute, sharding)
    try:
        return ctx.switches[key]
    except KeyError:
        pass
    point = {**outer, "tp_comm_overlap": combo[0], "offload": offload, "recompute": recompute,
             "sharding": sharding, "micro_batch": mb}
    try:       # a value its field refuses rejects the member first (the same for every outer point)
        plan = build(ParallelPlan, parallel_of(point, ctx.space), key_prefix="parallel")
        check_switches(plan, training_of(ctx, mb))
        check_recompute_modules(ctx.fixed.model, plan)
        verdict = None
    except UserError as exc:
        verdict = exc
    ctx.switches[key] = verdict
    return verdict
