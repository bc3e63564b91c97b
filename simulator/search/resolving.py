"""Resolving a candidate of the search (:func:`resolved`): its plan, or the rule's kept verdict that rejects it.

Split out of :mod:`simulator.search.evaluate` (round 10, docs/search/time_to_answer.md): per :func:`plan_key` the
validated ``parallel:`` config and the batch-free rules' verdict, per (micro-batch, dp, pp, vpp, schedule) the
micro-batch's rules' verdict, per rejection its reason; a rejection is returned, not raised, to the candidate loop.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from simulator.errors import UserError
from simulator.memory.offload import check_host_memory
from simulator.model.strict import build
from simulator.plan.config import ParallelPlan
from simulator.plan.resolve import batch_free_rules, finish_plan
from simulator.plan.rules import check_batch
from simulator.scenario.limits import check_timeline
from simulator.search.evaluated import reason_of
from simulator.search.space import INNER, OUTER, parallel_of

if TYPE_CHECKING:
    from simulator.search.evaluate import Context

#: validated configs and verdicts a context keeps per kind (a million-point space would otherwise hold ~10^5
#: ParallelPlans)
BUILT_CACHE = 4096

#: a point's values but its micro-batch (the key of its validated ``parallel:`` config)
_PARALLEL = operator.itemgetter(*OUTER, *(k for k in INNER if k != "micro_batch"))
_KEY_LEN, _OVERLAP = len(OUTER) + len(INNER) - 1, len(OUTER) + INNER.index("tp_comm_overlap")


def plan_key(ctx: Context, point: dict[str, Any]) -> tuple:
    """The key of what a point's plan shares with its other micro-batches (:func:`resolve`): its values but the
    micro-batch (the space's values and shared keys complete its ``parallel:`` mapping); for a point without its
    inner values, its mapping and GPUs."""
    try:
        return _PARALLEL(point)
    except KeyError:
        return tuple(parallel_of(point, ctx.space).items()), point["gpus"]


def resolve(ctx: Context, point: dict[str, Any], key: tuple | None = None):
    """The resolved plan of a candidate (raises UserError when a rule rejects it); ``key``: its :func:`plan_key`
    (:func:`resolved`, its rejection raised)."""
    plan = resolved(ctx, point, key)
    if isinstance(plan, UserError):
        raise plan.with_traceback(None)
    return plan


def resolved(ctx: Context, point: dict[str, Any], key: tuple | None = None):
    """The resolved plan of a candidate, or the kept UserError of the batch-free rules or the micro-batch's rules
    that rejects it (returned, not raised: round 10); the timeline limit and the host check still raise.

    Once per key (docs/search/time_to_answer.md, round 9): the validated ``parallel:`` config, every rule but the
    micro-batch's (:func:`batch_free_rules`, a pure function of it: the same result, or the same first rejection,
    for every micro-batch), and the offload and recipe, which read the parallel config and the training but its
    micro-batch (the recipe of ``parallel:`` only the sharding switches, :func:`~simulator.plan.recipe.sharding_stage`
    and ``zero``: kept per switches, tests/search/test_resolve_cost.py checks). The micro-batch's rules
    (:func:`check_batch`) once per (micro-batch, dp, pp, vpp, schedule), all they read besides the fixed global
    batch (round 10): a rejection is returned before :func:`finish_plan`, which would raise it first."""
    mb = point.get("micro_batch", ctx.fixed.training.micro_batch)
    training = training_of(ctx, mb)
    parallel, rules, derived = _entry(ctx, point, training, plan_key(ctx, point) if key is None else key)
    if isinstance(rules, UserError):
        return rules
    batch = (mb, rules[1], parallel.pp, parallel.vpp, parallel.schedule)
    if (micro := ctx.batches.get(batch)) is None:
        micro = batch_verdict(ctx, batch, training, parallel)
    if isinstance(micro, UserError):
        return micro
    plan = finish_plan(ctx.fixed.model, parallel, training, point["gpus"], ctx.moe_backend, rules)
    if not derived:       # the key's first plan: its recipe once per sharding switches, all the recipe reads of
        switches = (parallel.zero, parallel.distributed_optimizer, parallel.megatron_fsdp)     # parallel:
        if (recipe := ctx.recipes.get(switches)) is None:
            recipe = ctx.recipes[switches] = plan.recipe
        derived.update(recipe=recipe, offload=plan.offload)
    plan.__dict__.update(derived)       # the plan's cached properties, the same for every plan of the key
    check_timeline(plan)
    if plan.offload.any:      # offload: the node's host memory holds what it offloads
        # a pure function of the plan without its micro-batch, unless activations are offloaded (their bytes and
        # the micro-batches in flight follow the micro-batch): once per plan without it (docs/search.md, "Time to
        # the answer, round 3")
        _verdict(ctx, "host", (key, mb if plan.offload.activation_layers else None),
                 lambda: check_host_memory(plan, ctx.fixed.cluster))
    return plan


def _entry(ctx: Context, point: dict[str, Any], training, key: tuple) -> tuple[ParallelPlan, Any, dict]:
    """The kept :func:`_keyed_entry` of ``key``, made when missing (bounded; an unhashable key: not kept)."""
    try:
        entry = ctx.keyed.get(key)
    except TypeError:             # an unhashable value (a list in parallel:): nothing kept
        return _keyed_entry(ctx, point, training, key)
    if entry is None:
        if len(ctx.keyed) >= BUILT_CACHE:    # bounded: a key's micro-batches come together
            ctx.keyed.clear()
        entry = ctx.keyed[key] = _keyed_entry(ctx, point, training, key)
    return entry


def training_of(ctx: Context, mb: int):
    """The scenario's training with micro-batch ``mb`` (one per micro-batch in the context)."""
    if (training := ctx.trainings.get(mb)) is None:
        training = ctx.trainings[mb] = ctx.fixed.training.model_copy(update={"micro_batch": mb})
    return training


def batch_verdict(ctx: Context, batch: tuple, training, parallel: ParallelPlan) -> int | UserError:
    """:func:`check_batch`'s micro-batch count, or its UserError, kept under ``batch`` = (micro-batch, dp, pp, vpp,
    schedule): it reads the global batch (fixed in a search), the micro-batch and dp, and the schedule's rules
    (:meth:`~simulator.plan.schedules.Schedule.check_batch`) pp, vpp and the schedule's name."""
    if len(ctx.batches) >= BUILT_CACHE:
        ctx.batches.clear()
    try:
        verdict = check_batch(training, batch[1], parallel)
    except UserError as exc:
        verdict = exc
    ctx.batches[batch] = verdict
    return verdict


def _keyed_entry(ctx: Context, point: dict[str, Any], training, key: tuple) -> tuple[ParallelPlan, Any, dict]:
    """(validated ``parallel:`` config, the batch-free rules' result or UserError, the derived values' slot) of a
    point with ``training`` (its micro-batch's); a config that fails validation raises (nothing kept).

    The same point with the other TP overlap value, if kept, gives both (round 9): no plan rule reads
    ``tp_comm_overlap`` (only the layer's pricing, simulator/compute/layer.py), so the verdict is its; and a bool
    is its own validated value of that bool field, ParallelPlan has no validator reading two fields, so the config is
    the sibling's with that one value (the same fields, values and fields set as the mapping validated in full)."""
    overlap = point.get("tp_comm_overlap")
    if type(overlap) is bool and len(key) == _KEY_LEN:
        sibling = ctx.keyed.get(key[:_OVERLAP] + (not overlap,) + key[_OVERLAP + 1:])
        if sibling is not None and "tp_comm_overlap" in sibling[0].model_fields_set:
            return sibling[0].model_copy(update={"tp_comm_overlap": overlap}), sibling[1], {}
    parallel = build(ParallelPlan, parallel_of(point, ctx.space), key_prefix="parallel")
    try:
        rules = batch_free_rules(ctx.fixed.model, parallel, training, point["gpus"])
    except UserError as exc:
        rules = exc
    return parallel, rules, {}


def _verdict(ctx: Context, kind: str, key: Any, check):
    """``check()``'s result once per ``(kind, key)`` in the context (bounded), its UserError kept as the verdict too
    and raised again on every call (a rule's verdict is a pure function of the key; unhashable: not kept)."""
    try:
        result = ctx.built[kind, key]
    except (KeyError, TypeError) as missing:
        try:
            result = check()
        except UserError as exc:
            result = exc
        if isinstance(missing, KeyError):
            if len(ctx.built) >= BUILT_CACHE:
                ctx.built.clear()
            ctx.built[kind, key] = result
    if isinstance(result, UserError):
        raise result.with_traceback(None)
    return result


def kept_rules(ctx: Context, key: tuple):
    """The batch-free rules' verdict on a point of :func:`plan_key` ``key`` if the context keeps one, else None."""
    try:
        entry = ctx.keyed.get(key)
    except TypeError:          # an unhashable value
        return None
    return entry[1] if entry is not None else None


def reason_for(ctx: Context, exc: UserError) -> str:
    """:func:`reason_of` a rejection, once per UserError object (a kept verdict rejects many candidates; an
    exception hashes by identity, and the context holds it, so its id is not reused)."""
    if (reason := ctx.reasons.get(exc)) is None:
        if len(ctx.reasons) >= BUILT_CACHE:
            ctx.reasons.clear()
        reason = ctx.reasons[exc] = reason_of(exc)
    return reason
