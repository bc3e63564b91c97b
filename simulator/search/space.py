"""The plan space of a search: every combination of the searched dimensions, as plain dicts (docs/search.md).

The scenario's ``parallel:`` values pin their dimensions; ``search:`` lists restrict the others; the defaults are
in :class:`simulator.scenario.search_section.SearchSection`'s field descriptions. A candidate is only a point of
the space: :func:`simulator.plan.resolve_plan` (the plan rules) decides whether it is a valid plan.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from simulator.errors import UserError
from simulator.plan.schedules import searched_schedules
from simulator.scenario.load import Fixed
from simulator.scenario.search_section import SearchSection

#: searched dimensions in enumeration order: the outer ones fix the plan's structure, the inner ones
#: (:data:`INNER`) only its memory and time. Schedule, pp and vpp vary slowest, so that the plans of one pipeline
#: timeline structure come close together (into one shard, whose timelines are evaluated together)
OUTER = ("gpus", "schedule", "pp", "vpp", "tp", "cp", "ep", "sp")
INNER = ("recompute", "sharding", "micro_batch")

#: sharding name -> the ``parallel:`` keys that say it
SHARDING = {"none": {"zero": 0, "distributed_optimizer": False},
            "distributed_optimizer": {"zero": 0, "distributed_optimizer": True},
            "zero1": {"zero": 1, "distributed_optimizer": False},
            "zero2": {"zero": 2, "distributed_optimizer": False},
            "zero3": {"zero": 3, "distributed_optimizer": False}}

def offload_choices(fixed: Fixed) -> dict[str, dict[str, Any]]:
    """The offload values a search may try on ``fixed``'s system, name -> the ``parallel:`` keys that say it
    (docs/offload.md; the default space adds them as a dimension, as :data:`SHARDING`). ``none`` always; where
    the node profile gives its host memory: the optimizer states on the host (Megatron --optimizer-cpu-offload with
    --overlap-cpu-optimizer-d2h-h2d, or DeepSpeed ZeRO-Offload / FSDP2 CPUOffloadPolicy), and for the pytorch
    family ZeRO-Infinity's parameters on the host (and on NVMe where the node has drives); for Megatron, half the
    layers' activations on the host (--cpu-offloading-num-layers). The plan rules reject the combinations a
    framework refuses (parameter offload without zero 3, activation offload with pp > 1 or recompute), and the
    node's host memory the ones it cannot hold. Optimizer and parameter offload change only a plan's fixed bytes;
    activation offload also its in-flight activations, so a search keying peaks by everything but the sharding and
    the micro-batch must key them by this value too."""
    node = fixed.cluster.node
    out: dict[str, dict[str, Any]] = {"none": {}}
    if node.cpu.memory_capacity is None or node.cpu.memory_bandwidth is None:
        return out
    optimizer = {"optimizer_cpu_offload": True}
    if fixed.training.family == "megatron":
        out["optimizer"] = {**optimizer, "overlap_cpu_optimizer_d2h_h2d": True}
        if fixed.model.layers > 1:
            out["activations"] = {"cpu_offloading_num_layers": fixed.model.layers // 2}
        return out
    out["optimizer"] = optimizer
    out["params_cpu"] = {**optimizer, "offload_param": "cpu"}
    if node.nvme is not None:
        out["params_nvme"] = {**optimizer, "offload_param": "nvme"}
    return out


#: overlap switches a search turns on unless ``parallel:`` sets them (they only hide communication)
OVERLAP_DEFAULTS = {"overlap_grad_reduce": True, "overlap_param_gather": True}


@dataclass(frozen=True)
class Space:
    """The candidate values of every searched dimension and the ``parallel:`` keys every plan shares."""

    values: dict[str, tuple[Any, ...]]
    shared: dict[str, Any]
    pinned_dp: int | None

    @property
    def size(self) -> int:
        """Points of the full product (before the plan rules)."""
        return math.prod(len(v) for v in self.values.values())

    def outer(self) -> Iterator[dict[str, Any]]:
        for combo in itertools.product(*(self.values[k] for k in OUTER)):
            yield dict(zip(OUTER, combo, strict=True))

    def inner_size(self) -> int:
        return math.prod(len(self.values[k]) for k in INNER)

    def inner(self, collapse_sharding: bool) -> Iterator[dict[str, Any]]:
        """Inner combinations; ``collapse_sharding`` keeps only ``none`` (sharding over one rank is the same plan)."""
        sharding = ("none",) if collapse_sharding else self.values["sharding"]
        for rec, shard, mb in itertools.product(self.values["recompute"], sharding, self.values["micro_batch"]):
            yield {"recompute": rec, "sharding": shard, "micro_batch": mb}


def parallel_of(point: dict[str, Any], space: Space) -> dict[str, Any]:
    """The ``parallel:`` mapping of a point (outer and inner values merged)."""
    out = dict(space.shared)
    out.update(tp=point["tp"], cp=point["cp"], pp=point["pp"], vpp=point["vpp"], ep=point["ep"],
               schedule=point["schedule"], sp=point["sp"] and point["tp"] > 1)
    if space.pinned_dp is not None:
        out["dp"] = space.pinned_dp
    if "recompute" in point:
        out["recompute"] = point["recompute"]
        out.update(SHARDING[point["sharding"]])
    return out


def _powers_of_two(limit: int) -> tuple[int, ...]:
    return tuple(2 ** k for k in range(int(math.log2(limit)) + 1))


def _defaults(fixed: Fixed) -> dict[str, tuple[Any, ...]]:
    m, node_gpus = fixed.model, fixed.cluster.node.gpus
    megatron = fixed.training.family == "megatron"
    return {
        "gpus": (fixed.gpus,),
        "tp": _powers_of_two(node_gpus),
        "pp": tuple(d for d in range(1, m.layers + 1) if m.layers % d == 0 and d <= fixed.gpus),
        "vpp": (1, 2, 3, 4, 6, 8),
        "cp": (1,) if fixed.training.seq_len < 32768 else (1, 2, 4, 8),
        "ep": (1,) if m.moe is None else tuple(d for d in range(1, m.moe.experts + 1)
                                               if m.moe.experts % d == 0 and d <= fixed.gpus),
        "micro_batch": (1, 2, 4, 8),
        "recompute": ("none", "selective", "full"),
        "sharding": tuple(SHARDING) if megatron else ("none", "zero1", "zero2", "zero3"),
        "schedule": searched_schedules(),
        "sp": (True,),
    }


def _pinned(parallel: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Searched dimensions the scenario's ``parallel:`` fixes."""
    out = {k: (parallel[k],) for k in ("tp", "pp", "vpp", "cp", "ep", "schedule", "sp", "recompute")
           if k in parallel}
    if "zero" in parallel or "distributed_optimizer" in parallel:
        key = {"zero": parallel.get("zero", 0), "distributed_optimizer": bool(parallel.get("distributed_optimizer"))}
        names = [n for n, v in SHARDING.items() if v == key]
        if not names:
            raise UserError(f"zero ({key['zero']}) with distributed_optimizer: true is not a sharding the search "
                            "knows; give one of them", key_path="parallel.zero")
        out["sharding"] = (names[0],)
    return out


def build_space(fixed: Fixed, parallel: dict[str, Any], section: SearchSection) -> Space:
    """The space of a search: defaults, narrowed by ``search:``, pinned by ``parallel:``.

    Raises:
        UserError: a pinned value outside its ``search:`` list, or more GPUs than the system has.
    """
    values = _defaults(fixed)
    for key in values:
        given = getattr(section, key)
        if given is not None:
            values[key] = tuple(dict.fromkeys(given))
    for key, pin in _pinned(parallel).items():
        given = getattr(section, key)
        if given is not None and pin[0] not in given:
            raise UserError(f"parallel.{key} pins {pin[0]!r}, which search.{key} {list(given)} excludes; remove one "
                            "of the two", key_path=f"search.{key}")
        values[key] = pin
    if section.tp_within_node and "tp" not in parallel:
        values["tp"] = tuple(t for t in values["tp"] if t <= fixed.cluster.node.gpus) or values["tp"]
    for n in values["gpus"]:
        if n > fixed.cluster.gpus:
            raise UserError(f"search.gpus asks for {n:,} GPUs but {fixed.system.nodes} x {fixed.cluster.node.name} "
                            f"has {fixed.cluster.gpus:,}", key_path="search.gpus")
    searched = {"tp", "pp", "vpp", "cp", "ep", "schedule", "sp", "recompute", "zero", "distributed_optimizer", "dp"}
    shared = {**OVERLAP_DEFAULTS, **{k: v for k, v in parallel.items() if k not in searched}}
    return Space(values, shared, parallel.get("dp"))
