"""The plan space of a search: every combination of the searched dimensions, as plain dicts (docs/search.md).

The scenario's ``parallel:`` values pin their dimensions; ``search:`` lists restrict the others; the defaults are
in :class:`simulator.scenario.search_section.SearchSection`'s field descriptions. A candidate is only a point of
the space: :func:`simulator.plan.resolve_plan` (the plan rules) decides whether it is a valid plan.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import UserError
from simulator.plan.schedules import schedule_names
from simulator.scenario.load import Fixed
from simulator.scenario.search_section import SearchSection

#: searched dimensions in enumeration order: the outer ones fix the plan's structure, the inner ones
#: (:data:`INNER`) only its memory and time. Schedule, pp and vpp vary slowest, so that the plans of one pipeline
#: timeline structure come close together (into one shard, whose timelines are evaluated together)
OUTER = ("gpus", "schedule", "pp", "vpp", "split", "tp", "cp", "ulysses", "ep", "sp")
INNER = ("tp_comm_overlap", "offload", "recompute", "sharding", "micro_batch")   # (Space.members spells them)

#: inner dimensions that change a plan's step time but not its memory (the memory shortcuts key without them)
TIME_ONLY = ("tp_comm_overlap",)

#: ``split`` name -> how the layers fall into the pp x vpp model chunks: ``uniform`` (layers / (pp vpp) each),
#: ``embedding_loss`` (Megatron-Core ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``:
#: the embedding and the loss count as one layer each, so with n = (layers + 2) / (pp vpp) the first and last chunks
#: take n - 1 layers and the others n; :func:`pipeline_layers`), ``given`` (``parallel.pipeline_layers``)
SPLITS = ("uniform", "embedding_loss")

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
    layers: int = 1
    offload: dict[str, dict[str, Any]] = field(default_factory=lambda: {"none": {}})
    """offload name -> the ``parallel:`` keys that say it (:func:`offload_choices`)"""
    _inner: dict = field(default_factory=dict, compare=False, repr=False)
    """:meth:`inner`'s combinations per ``(collapse_sharding, collapse_overlap)``, made on first use"""

    @property
    def size(self) -> int:
        """Points of the full product (before the plan rules)."""
        return math.prod(len(v) for v in self.values.values())

    def outer(self) -> Iterator[dict[str, Any]]:
        for combo in itertools.product(*(self.values[k] for k in OUTER)):
            yield dict(zip(OUTER, combo, strict=True))

    def place(self, point: dict[str, Any]) -> tuple[int, ...]:
        """Where ``point`` comes in this space's enumeration (:meth:`outer` x :meth:`inner`): the index of each of
        its values among its dimension's, outer dimensions first (-1: a value the space does not list)."""
        values = self.values
        return tuple(values[k].index(point[k]) if point.get(k) in values[k] else -1 for k in (*OUTER, *INNER))

    def inner_size(self) -> int:
        return math.prod(len(self.values[k]) for k in INNER)

    def inner(self, collapse_sharding: bool, collapse_overlap: bool = False) -> Iterator[dict[str, Any]]:
        """Inner combinations; ``collapse_sharding`` keeps only ``none`` (sharding over one rank is the same plan),
        ``collapse_overlap`` only the first TP overlap value (with tp 1 there is no TP communication to overlap).
        The combinations are made once per pair of flags (a search asks once or twice per outer point); each call
        yields new dicts."""
        return (dict(zip(INNER, combo, strict=True)) for combo in self.combos(collapse_sharding, collapse_overlap))

    def members(self, outer: dict[str, Any], collapse_sharding: bool, collapse_overlap: bool = False
                ) -> list[dict[str, Any]]:
        """``{**outer, **inner}`` for each of :meth:`inner`'s combinations (the same keys in the same order), each
        built as one dict (round 10: the search builds one per candidate, ~10^5 on 1T, half the time of merging
        two)."""
        return self.members_of(outer, self.combos(collapse_sharding, collapse_overlap))

    @staticmethod
    def members_of(outer: dict[str, Any], combos: tuple[tuple, ...]) -> list[dict[str, Any]]:
        """``{**outer, **inner}`` for each inner combination of ``combos`` (tuples in :data:`INNER`'s order)."""
        return [{**outer, "tp_comm_overlap": o, "offload": f, "recompute": r, "sharding": s, "micro_batch": m}
                for o, f, r, s, m in combos]

    def combos(self, collapse_sharding: bool, collapse_overlap: bool) -> tuple[tuple, ...]:
        """:meth:`inner`'s combinations as tuples in :data:`INNER`'s order, made once per pair of flags."""
        combos = self._inner.get((collapse_sharding, collapse_overlap))
        if combos is None:
            values = dict(self.values)
            if collapse_sharding:
                values["sharding"] = ("none",)
            if collapse_overlap:
                values["tp_comm_overlap"] = values["tp_comm_overlap"][:1]
            combos = self._inner[collapse_sharding, collapse_overlap] = tuple(
                itertools.product(*(values[k] for k in INNER)))
        return combos


def parallel_of(point: dict[str, Any], space: Space) -> dict[str, Any]:
    """The ``parallel:`` mapping of a point (outer and inner values merged).

    Raises:
        UserError: an ``embedding_loss`` split that does not divide the layers (a structural rule).
    """
    out = dict(space.shared)
    out.update(tp=point["tp"], cp=point["cp"], pp=point["pp"], vpp=point["vpp"], ep=point["ep"],
               schedule=point["schedule"], sp=point["sp"] and point["tp"] > 1, ulysses=point.get("ulysses", 1))
    if point.get("split", "uniform") == "embedding_loss":
        out["pipeline_layers"] = pipeline_layers(space.layers, point["pp"] * point["vpp"])
    if space.pinned_dp is not None:
        out["dp"] = space.pinned_dp
    if "recompute" in point:
        mode, _, modules = point["recompute"].partition(":")
        out["recompute"] = mode
        if modules:
            out["recompute_modules"] = tuple(modules.split(","))
        out.update(SHARDING[point["sharding"]])
        if "tp_comm_overlap" in point:     # (a point written by hand may leave the newer knobs out)
            out["tp_comm_overlap"] = point["tp_comm_overlap"]
        out.update(space.offload[point.get("offload", "none")])
    return out


def pipeline_layers(layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per model chunk when the embedding and the loss each count as a layer (Megatron-Core
    ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``, TransformerConfig): with
    n = (layers + 2) / chunks, the first and the last chunk n - 1, the others n.

    Raises:
        UserError: fewer than two chunks, chunks not dividing layers + 2, or n - 1 = 0 (a chunk with no layer).
    """
    n, rest = divmod(layers + 2, chunks)
    if chunks < 2 or rest or n < 2:
        raise UserError(f"split embedding_loss needs pp*vpp >= 2 model chunks dividing layers + 2 ({layers} + 2) "
                        f"into chunks of at least 2; pp*vpp = {chunks}", key_path="parallel.pipeline_layers")
    return (n - 1, *(n,) * (chunks - 2), n - 1)


def recompute_values(modes: tuple[str, ...], module_sets: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """The ``recompute`` dimension: ``none`` and ``full`` as given, and ``selective`` once per module set
    (``selective`` alone for Megatron's default ``[core_attn]``, else ``selective:m1,m2``)."""
    out = []
    for mode in modes:
        if mode != "selective":
            out.append(mode)
            continue
        out += ["selective" if mods == ("core_attn",) else "selective:" + ",".join(mods) for mods in module_sets]
    return tuple(dict.fromkeys(out))


def _module_sets(fixed: Fixed) -> tuple[tuple[str, ...], ...]:
    """Selective-recompute module sets the search tries by default (Megatron-LM ``--recompute-modules``, framework
    megatron only): core attention (Megatron's default); with the layer norms; with the dense MLPs as well; for MoE
    models the experts' activation function (``moe_act``), and for MLA models DeepSeek-V3's recipe set
    (``mla_up_proj``, ``layernorm``, ``moe_act``). A set naming a module the model lacks is not offered."""
    m = fixed.model
    if fixed.training.family != "megatron":
        return (("core_attn",),)
    dense = any(not m.is_moe_layer(i) for i in range(m.layers))
    sets = [("core_attn",), ("core_attn", "layernorm")]
    if dense:
        sets.append(("core_attn", "layernorm", "mlp"))
    if m.moe is not None:
        sets.append(("core_attn", "layernorm", "moe_act"))
        if m.mla is not None:
            sets.append(("mla_up_proj", "layernorm", "moe_act"))
    return tuple(sets)


def _powers_of_two(limit: int) -> tuple[int, ...]:
    return tuple(2 ** k for k in range(int(math.log2(limit)) + 1))


def _defaults(fixed: Fixed) -> dict[str, tuple[Any, ...]]:
    m, node_gpus = fixed.model, fixed.cluster.node.gpus
    megatron = fixed.training.family == "megatron"
    long = fixed.training.seq_len >= 32768
    return {
        "gpus": (fixed.gpus,),
        "tp": _powers_of_two(node_gpus),
        # pp: the divisors of the layers (uniform split) and of layers + 2 (embedding_loss split)
        "pp": tuple(d for d in range(1, m.layers + 1) if (m.layers % d == 0 or (m.layers + 2) % d == 0)
                    and d <= fixed.gpus),
        "vpp": (1, 2, 3, 4, 6, 8),
        "split": SPLITS,
        "cp": (1, 2, 4, 8) if long else (1,),
        "ulysses": (1, 2, 4, 8) if long else (1,),
        "ep": (1,) if m.moe is None else tuple(d for d in range(1, m.moe.experts + 1)
                                               if m.moe.experts % d == 0 and d <= fixed.gpus),
        "micro_batch": (1, 2, 4, 8),
        "recompute": recompute_values(("none", "selective", "full"), _module_sets(fixed)),
        "sharding": tuple(SHARDING) if megatron else ("none", "zero1", "zero2", "zero3"),
        "schedule": schedule_names(),
        "sp": (True,),
        "tp_comm_overlap": (False, True),
        "offload": tuple(offload_choices(fixed)),
    }


def _pinned(parallel: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Searched dimensions the scenario's ``parallel:`` fixes."""
    out = {k: (parallel[k],) for k in ("tp", "pp", "vpp", "cp", "ulysses", "ep", "schedule", "sp", "recompute",
                                       "tp_comm_overlap") if k in parallel}
    if "pipeline_layers" in parallel:
        out["split"] = ("given",)
    if parallel.get("recompute_modules"):
        out["recompute"] = ("selective:" + ",".join(parallel["recompute_modules"]),)
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
        UserError: a pinned value outside its ``search:`` list, an unknown offload name, or more GPUs than the
            system has.
    """
    values = _defaults(fixed)
    offload = offload_choices(fixed)
    for key in values:
        given = getattr(section, key, None)
        if given is not None:
            values[key] = tuple(dict.fromkeys(given))
    if section.recompute is not None or section.recompute_modules is not None:
        sets = tuple(tuple(s) for s in section.recompute_modules) if section.recompute_modules else _module_sets(fixed)
        values["recompute"] = recompute_values(tuple(section.recompute or ("none", "selective", "full")), sets)
    for name in values["offload"]:
        if name not in offload:
            raise UserError(f"search.offload names {name!r}; this system's choices: {', '.join(offload)}",
                            key_path="search.offload")
    for key, pin in _pinned(parallel).items():
        given = getattr(section, key, None)
        value = pin[0].partition(":")[0] if key == "recompute" else pin[0]     # recompute: its mode
        if given is not None and value not in given:
            raise UserError(f"parallel.{key} pins {pin[0]!r}, which search.{key} {list(given)} excludes; remove one "
                            "of the two", key_path=f"search.{key}")
        values[key] = pin
    if any(k in parallel for table in offload.values() for k in table):
        values["offload"] = ("none",)      # parallel: says the offload: every plan takes it as given
    if section.tp_within_node and "tp" not in parallel:
        values["tp"] = tuple(t for t in values["tp"] if t <= fixed.cluster.node.gpus) or values["tp"]
    for n in values["gpus"]:
        if n > fixed.cluster.gpus:
            raise UserError(f"search.gpus asks for {n:,} GPUs but {fixed.system.nodes} x {fixed.cluster.node.name} "
                            f"has {fixed.cluster.gpus:,}", key_path="search.gpus")
    searched = {"tp", "pp", "vpp", "cp", "ulysses", "ep", "schedule", "sp", "recompute", "recompute_modules", "zero",
                "distributed_optimizer", "dp", "tp_comm_overlap"}
    shared = {**OVERLAP_DEFAULTS, **{k: v for k, v in parallel.items() if k not in searched}}
    return Space(values, shared, parallel.get("dp"), fixed.model.layers, offload)
