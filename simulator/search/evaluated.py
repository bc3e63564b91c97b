"""What evaluating candidates gives back (:class:`Evaluated`: the valid plans' rows, the rejections by reason, the
smallest out-of-memory peak) and how a rejection's reason is worded (:func:`reason_of`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from simulator.caching import memo
from simulator.errors import UserError

OOM_REASON = "memory: device peak + search.memory_headroom exceeds HBM"


def reason_of(exc: UserError) -> str:
    """A rejection reason without its numbers, so that one rule counts as one reason."""
    return _reason(exc.key_path, exc.message)


@memo(maxsize=4096)
def _reason(key_path: str | None, message: str) -> str:
    """:func:`reason_of` by value (a rule's message repeats with the same numbers across a search)."""
    text = re.sub(r"(?<![\w.])\d[\d,.]*(?![\w])", "N", message)
    return f"{key_path}: {text}" if key_path else text


@dataclass
class Evaluated:
    """Rows of the valid plans and the count of rejected candidates by reason."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)
    evaluated: int = 0
    least_oom: tuple[float, bool, dict[str, Any]] | None = None
    """Of the plans that passed the rules but not memory, the smallest device peak seen (bytes, without the
    headroom), whether it is the plan's peak (else a lower bound: its model states, NCCL's buffers and the runtime)
    and the plan (docs/search.md, "When nothing fits")."""
    least_oom_at: tuple[int, ...] = ()
    """The place of ``least_oom``'s point in the space's enumeration (:meth:`simulator.search.space.Space.place`):
    of equal peaks the first in that order is kept, whatever order the plans are evaluated in (a search pruned by
    parts, or its shards)."""
    bounds: list[tuple[float, float, int, dict[str, Any]]] = field(default_factory=list)
    """With ``lower_only``: per plan timed alone that the bound kept, its step's lower bound (seconds), tokens per
    step, GPUs and point (:func:`evaluate_points`)."""

    def merge(self, other: Evaluated) -> None:
        self.rows += other.rows
        self.bounds += other.bounds
        self.rejected.update(other.rejected)
        self.evaluated += other.evaluated
        if other.least_oom is not None and (self.least_oom is None or (other.least_oom[0], other.least_oom_at)
                                            < (self.least_oom[0], self.least_oom_at)):
            self.least_oom, self.least_oom_at = other.least_oom, other.least_oom_at

    def note_oom(self, peak: float, exact: bool, plan, sharding: str, at: tuple[int, ...] = (),
                 recompute: str | None = None) -> None:
        """Keep ``plan`` (out of memory at ``peak`` bytes; its point at place ``at`` of the space:
        :meth:`simulator.search.space.Space.place`) when its peak is the smallest yet, or as small and earlier in
        the space; ``recompute``: the recompute mode to name in place of the plan's (a key of the memory bound,
        :mod:`simulator.search.memory_bound`, whose representative may have another)."""
        if self.least_oom is None or (peak, at) < (self.least_oom[0], self.least_oom_at):
            self.least_oom_at = at
            p = plan.parallel
            self.least_oom = (peak, exact, {"gpus": plan.world_size, "tp": p.tp, "pp": p.pp, "dp": plan.dp,
                                            "cp": p.cp, "ep": p.ep, "vpp": p.vpp, "schedule": p.schedule,
                                            "recompute": recompute or p.recompute, "sharding": sharding,
                                            "micro_batch": plan.training.micro_batch})
