""":func:`search`: the best plans for a scenario's model, system and batch (docs/search.md).

Enumerates the plan space (:mod:`simulator.search.space`), rejects a whole structure at once when a rule that
does not depend on the inner dimensions (recompute, sharding, micro-batch) rejects it, evaluates the rest on an
executor (:mod:`simulator.search.executors`) with the fast path (:mod:`simulator.search.evaluate`) and ranks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import UserError
from simulator.model.strict import build
from simulator.plan.schedules import schedule_named
from simulator.scenario.document import Document, read_document
from simulator.scenario.load import fixed_parts
from simulator.scenario.search_section import SearchSection
from simulator.search.best_first import time_best_first
from simulator.search.bound import (
    BOUND_REASON,
    BOUNDED,
    EXACT_TOP,
    bound_of,
    timed_alone,
)
from simulator.search.caches import without_cycle_collector
from simulator.search.dp_floor import refined_lowers
from simulator.search.evaluate import OOM_REASON, Context, Evaluated, resolve
from simulator.search.evaluated import reason_of
from simulator.search.group_bound import (
    GROUP_REASON,
    GROUP_ROUND,
    Group,
    group_variants,
    set_lowers,
)
from simulator.search.inner_rules import inner_verdicts
from simulator.search.memory_bound import MEMORY_BOUND_REASON, skip_key
from simulator.search.rank import OBJECTIVES, TERMS, rank
from simulator.search.resolving import kept_rules, plan_key, reason_for
from simulator.search.space import SHARDING, build_space
from simulator.search.whole_run import RUN_COLUMNS, RUN_OBJECTIVES, add_run_columns

#: largest plan space a search evaluates unless --max-plans raises it (points of the full product; the whole
#: default space of a 1T model on 16,384 GPUs with three offload choices is ~2.2 x 10^6, most rejected in bulk)
MAX_SEARCH_PLANS = 10_000_000

#: rules whose rejection holds for every recompute, sharding and micro-batch choice (their key paths)
STRUCTURAL = {"parallel.tp", "parallel.pp", "parallel.dp", "parallel.vpp", "parallel.schedule", "parallel.cp",
              "parallel.ep", "parallel.etp", "parallel.sp", "parallel.ulysses", "parallel.pipeline_layers",
              "training.seq_len"}


@dataclass(frozen=True)
class SearchResult:
    """Counts, timing and every valid plan, best first (rows as :func:`simulator.search.evaluate` writes them)."""

    evaluated: int
    valid: int
    rejected: dict[str, int]
    seconds: float
    plans: list[dict[str, Any]]
    objective: str

    @property
    def pruned_by_memory(self) -> int:
        """Plans that pass the rules but whose device peak exceeds HBM (the rest of ``rejected`` are rule rejections)."""
        return self.rejected.get(OOM_REASON, 0)

    @property
    def pruned_by_bound(self) -> int:
        """Valid plans not timed: timed alone, and provably worse than the first ``exact_top`` (docs/search.md,
        "Pruning by a bound")."""
        return self.rejected.get(BOUND_REASON, 0)

    @property
    def pruned_by_group_bound(self) -> int:
        """Points never resolved: their whole group (one outer structure) has a step bound provably worse than the
        first ``exact_top`` plans (docs/search/time_to_answer.md, "Time to the answer, round 4"); the rules, memory and time of
        these points are not known."""
        return self.rejected.get(GROUP_REASON, 0)

    @property
    def pruned_by_memory_bound(self) -> int:
        """Points never resolved: a lower bound of their device peak exceeds HBM (each out of memory or rejected by
        a rule; :mod:`simulator.search.memory_bound`, docs/search/time_to_answer.md, round 8)."""
        return self.rejected.get(MEMORY_BOUND_REASON, 0)

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """docs/interface.md ``simulator search --json``: the ``top`` best plans."""
        return {"evaluated": self.evaluated, "valid": self.valid, "rejected": self.rejected,
                "seconds": self.seconds, "objective": self.objective,
                "plans": [plan_dict(r) for r in self.plans[:top]]}

    def to_frame(self):
        """Every valid plan as one row (pandas)."""
        import pandas as pd

        return pd.DataFrame(self.plans)


def plan_dict(row: dict[str, Any]) -> dict[str, Any]:
    """One plan of the JSON output: rank, parallel, training, the headline numbers and the breakdown."""
    parallel = {k: row[k] for k in ("tp", "pp", "dp", "cp", "ulysses", "ep", "vpp", "sp", "schedule", "recompute",
                                    "tp_comm_overlap")}
    parallel.update(SHARDING[row["sharding"]])
    if row["recompute"] == "selective":
        parallel["recompute_modules"] = row["recompute_modules"].split(",")
    if row["pipeline_layers"] is not None:
        parallel["pipeline_layers"] = list(row["pipeline_layers"])
    return {"rank": row["rank"], "gpus": row["gpus"], "parallel": parallel, "offload": row["offload"],
            "training": {"micro_batch": row["micro_batch"], "micro_batches": row["micro_batches"],
                         "global_batch": row["global_batch"], "seq_len": row["seq_len"]},
            "step_s": row["step_s"], "peak_bytes": row["peak_bytes"], "device_peak_bytes": row["device_peak_bytes"],
            "mfu": row["mfu"], "tokens_per_s": row["tokens_per_s"], "tokens_per_s_per_gpu": row["tokens_per_s_per_gpu"],
            "breakdown_s": {t.removesuffix("_s"): row[t] for t in TERMS}, "timeline": row["timeline"],
            **({"run": {k.removeprefix("run_"): row[k] for k in RUN_COLUMNS}} if "run_days" in row else {})}


def search_context(source: str | Path | dict | Document) -> Context:
    """The fixed parts, the plan space and the headroom of a scenario (validated; UserError located)."""
    document = source if isinstance(source, Document) else read_document(source)
    try:
        fixed = fixed_parts(document)
        section = build(SearchSection, document.data.get("search") or {}, key_prefix="search")
        parallel = document.data.get("parallel") or {}
        if not isinstance(parallel, dict):
            raise UserError(f"expected a mapping, got {type(parallel).__name__}", key_path="parallel")
        return Context(fixed, build_space(fixed, dict(parallel), section), section.memory_headroom)
    except UserError as exc:
        raise document.locate(exc) from None


def candidates(ctx: Context, max_plans: int, decide_inner: bool = True) -> tuple[list[dict[str, Any]], Evaluated]:
    """Candidates worth evaluating, and the points the plan rules reject outright (counted per point): whole outer
    structures, and with ``decide_inner`` the members the inner rules reject (:mod:`.inner_rules`)."""
    groups, skipped = candidate_groups(ctx, max_plans, decide_inner)
    return [p for g in groups for p in g.points], skipped


def candidate_groups(ctx: Context, max_plans: int, decide_inner: bool = True) -> tuple[list[Group], Evaluated]:
    """:func:`candidates` as one :class:`~simulator.search.group_bound.Group` per outer point."""
    space = ctx.space
    if space.size > max_plans:
        sizes = " x ".join(f"{k} {len(v)}" for k, v in space.values.items() if len(v) > 1)
        raise UserError(f"the plan space has {sizes} = {space.size:,} points, more than --max-plans {max_plans:,}; "
                        "narrow it with search: lists or parallel: values", key_path="search")
    groups, skipped = [], Evaluated()
    inner = space.inner_size()
    with without_cycle_collector():      # its resolves allocate as a batch does (round 5b)
        groups_of(ctx, space, groups, skipped, inner, decide_inner)
    return groups, skipped


def groups_of(ctx: Context, space, groups: list[Group], skipped: Evaluated, inner: int, decide_inner: bool) -> None:
    """The body of :func:`candidate_groups`: one group per outer point into ``groups`` (the members that the inner
    rules do not reject, with ``decide_inner``; a group left with none is not formed), the structural and inner
    rejections into ``skipped``."""
    for outer in space.outer():
        first = {**outer, **next(space.inner(False))}
        key = plan_key(ctx, first)
        try:
            plan = resolve(ctx, first, key)
        except UserError as exc:
            if exc.key_path in STRUCTURAL:
                skipped.rejected[reason_of(exc)] += inner
                skipped.evaluated += inner
                continue
            plan = None
        flags = (plan is not None and plan.dense_shard_degree == 1
                 and (plan.model.moe is None or plan.expert_shard_degree == 1), outer["tp"] == 1)
        rules = kept_rules(ctx, key)
        if not decide_inner or rules is None or isinstance(rules, UserError):   # (a batch-free rule rejects it)
            members = space.members(outer, *flags)
        else:        # the inner rules decided per group (round 11): only the members that pass them
            combos, rejected = inner_verdicts(ctx, outer, ctx.keyed[key][0], rules[1], flags)
            for exc, n in rejected:
                skipped.rejected[reason_for(ctx, exc)] += n
                skipped.evaluated += n
            members = space.members_of(outer, combos)
        if members:
            groups.append(Group(outer, members))


def bound_groups(ctx: Context, groups: list[Group], out: Evaluated) -> list[Group]:
    """Each group's bound (:func:`~simulator.search.group_bound.group_variants`); the groups without a plan (every
    member rejected by the rules) are counted into ``out`` under their reasons and left out (the memory bound runs
    later, per key the best-first order reaches: :func:`~simulator.search.memory_bound.skip_key`)."""
    kept, variants = [], []
    with without_cycle_collector():      # as a batch's evaluation (docs/search/time_to_answer.md, round 5b)
        for g in groups:
            parts = group_variants(ctx, g, resolve)
            if g.rejected:
                for exc in g.rejected:
                    out.rejected[reason_of(exc)] += 1
                out.evaluated += len(g.points)
            else:
                kept.append(g)
                variants.append(parts)
        set_lowers(kept, variants)
        return kept


def search(source: str | Path | dict | Document, *, objective: str = "step_time", max_plans: int = MAX_SEARCH_PLANS,
           executor: str = "local", ray_address: str | None = None,
           progress: Callable[[int], None] | None = None, exact_top: int | None = EXACT_TOP) -> SearchResult:
    """Search the plans of a scenario (docs/search.md).

    Args:
        source: a scenario path, mapping or Document; its ``parallel:`` values pin dimensions, ``search:``
            restricts the others.
        objective: ``step_time`` (smallest first) or ``tokens_per_s_per_gpu`` (largest first).
        max_plans: refuse a plan space with more points than this.
        executor: ``local`` (this process) or ``ray`` (shards on a Ray cluster; ``pip install -e '.[ray]'``).
        ray_address: the Ray cluster (default ``RAY_ADDRESS``, else a local one).
        progress: called with the number of candidates finished after each shard.
        exact_top: the first ``exact_top`` plans are exact and complete; a plan timed alone
            (DualPipe, DualPipeV, ZB-H1, ZB-V) whose step is provably worse than the ``exact_top``-th of the others
            is not timed (:mod:`simulator.search.bound`); None: every valid plan is timed.

    Raises:
        UserError: bad scenario or constraints, or no valid plan (with the most common rejection reasons).
    """
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}; accepted: {', '.join(OBJECTIVES)}")
    from simulator.search.executors import run_executor

    start = time.perf_counter()
    document = source if isinstance(source, Document) else read_document(source)
    ctx = search_context(document)
    groups, out = candidate_groups(ctx, max_plans)
    alone = {name: timed_alone(schedule_named(name)) for name in ctx.space.values["schedule"]}

    def run(todo: list[dict[str, Any]], recount: bool = False, **kwargs: Any) -> Evaluated:
        return run_executor(executor, document, ctx, todo, ray_address=ray_address,
                            progress=None if recount else progress, **kwargs)

    if exact_top is not None and objective in BOUNDED:     # every plan best bound first, pruned by the bounds
        time_best_first(out, bound_groups(ctx, groups, out), lambda g: alone[g.outer["schedule"]], objective,
                        exact_top, run, bound_of, GROUP_ROUND,
                        admit=lambda g, key, members: skip_key(ctx, out, g, key, members),
                        refine=lambda g, key, shardings: refined_lowers(ctx, g, key, shardings))
    else:
        out.merge(run([p for g in groups for p in g.points]))
    if not out.rows:
        raise NoPlanFits(no_plan_message(out, ctx), file=document.file, key_path="search",
                         result={"evaluated": out.evaluated, "valid": 0, "rejected": dict(out.rejected.most_common()),
                                 "seconds": time.perf_counter() - start, "objective": objective, "plans": [],
                                 "no_fit": no_fit(out, ctx)})
    rows = out.rows
    if objective in RUN_OBJECTIVES:
        rows = add_run_columns(rows, ctx, resolve)
        if objective == "cost" and ctx.fixed.run.gpu_hour_price is None:
            raise UserError("--objective cost needs run.gpu_hour_price", file=document.file, key_path="run")
    plans = rank(rows, objective)
    return SearchResult(out.evaluated, len(plans), dict(out.rejected.most_common()), time.perf_counter() - start,
                        plans, objective)


class NoPlanFits(UserError):
    """No valid plan (exit 2): the message, and ``result``, the ``--json`` object (docs/interface.md: the keys of
    :meth:`SearchResult.to_dict` with no plans, and ``no_fit``)."""

    def __init__(self, message: str, *, result: dict[str, Any], **where: Any) -> None:
        super().__init__(message, **where)
        self.result = result


def no_fit(out: Evaluated, ctx: Context) -> dict[str, Any]:
    """Why nothing fits: how many candidates passed the plan rules (each of them then out of memory), how many were
    skipped by the memory bound (:mod:`simulator.search.memory_bound`: each out of memory or rejected by a rule), the
    smallest device peak seen or bounded, whether it is exact (else a lower bound), its plan, and the GPU's capacity
    and the headroom it was held against (bytes)."""
    least = out.least_oom
    return {"passed_rules": out.rejected.get(OOM_REASON, 0),
            "memory_bound_skipped": out.rejected.get(MEMORY_BOUND_REASON, 0), "capacity_bytes": ctx.capacity,
            "memory_headroom_bytes": ctx.headroom_bytes, "least_device_peak_bytes": least[0] if least else None,
            "least_device_peak_exact": least[1] if least else None, "least_peak_plan": least[2] if least else None}


def no_plan_message(out: Evaluated, ctx: Context) -> str:
    """No valid plan: with candidates that passed the rules, that each was out of memory and the smallest peak
    against the capacity; the most common rule rejections."""
    common = Counter({r: n for r, n in out.rejected.items() if r not in (OOM_REASON, MEMORY_BOUND_REASON)}
                     ).most_common(3)
    rules = "; ".join(f"{n:,} x {reason}" for reason, n in common)
    if out.least_oom is None:
        return f"no valid plan among {out.evaluated:,} candidates; most common rejections: {rules}"
    peak, exact, plan = out.least_oom
    gib, passed, skipped = 2**30, out.rejected[OOM_REASON], out.rejected[MEMORY_BOUND_REASON]
    shape = " ".join(f"{k} {plan[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "vpp") if k in ("tp", "pp", "dp")
                     or plan[k] > 1)
    headroom = f" + search.memory_headroom {ctx.headroom_bytes / gib:.1f} GiB" if ctx.headroom_bytes else ""
    text = (f"no valid plan among {out.evaluated:,} candidates: {_why(passed, skipped)}; the smallest device peak, "
            f"{'' if exact else 'at least '}{peak / gib:.1f} GiB ({shape}, "
            f"{plan['sharding']}, recompute {plan['recompute']}, micro_batch {plan['micro_batch']}){headroom}, "
            f"exceeds the GPU's {ctx.capacity / gib:.1f} GiB")
    return text + (f"; the other {out.evaluated - passed - skipped:,} were rejected by the rules, most often "
                   f"{common[0][1]:,} x {common[0][0]}" if common else "")


def _why(passed: int, skipped: int) -> str:
    """The no-fit message's count of the candidates out of memory: those that passed the plan rules, and those the
    memory bound skipped (:mod:`simulator.search.memory_bound`)."""
    out = f"{passed:,} passed the plan rules and every one is out of memory" if passed else ""
    if skipped:
        out += (", and " if out else "") + (f"{skipped:,} were skipped unresolved, a lower bound of their device peak "
                                             "above HBM (each out of memory or rejected by a rule)")
    return out
