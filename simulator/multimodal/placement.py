"""Which GPUs each submodule occupies (DistMM's heterogeneity-aware placement manager, section 4.3).

- ``separate_nodes``: submodules take consecutive GPUs in the order given, so a submodule whose GPU count is a
  multiple of the node size owns whole nodes; its TP and PP groups stay where the rank order puts them and the
  traffic between submodules crosses the network.
- ``same_node``: every node holds a share of every submodule (GPU count / nodes each), so the exchange between
  submodules stays on NVLink while each submodule's data-parallel groups span all nodes.
- ``packed``: consecutive GPUs in the order given, whatever the counts: a node boundary may split a submodule, so a
  submodule may take a fraction of a node and share it with the next (the data load balancer's uneven splits,
  :func:`simulator.multimodal.balance.distmm_plan`); a submodule spread unevenly over nodes has its collectives
  priced on its real split (:meth:`simulator.topology.Topology.on_real_split`).
- ``spread``: every submodule's GPUs over every node as evenly as its count allows (n // nodes, or one more), the
  uneven counterpart of ``same_node``: the exchange between submodules mostly stays on NVLink.
- ``auto`` (the placement manager): the faster of the two by the predicted step.

Traffic between submodules is priced pair by pair on the real links: on NVLink where the two GPUs share a node,
on the NICs otherwise (:func:`simulator.pricing.exchange.pairs_exchange_s`).
"""

from __future__ import annotations

from collections import Counter

from simulator.errors import UserError
from simulator.topology import Topology


def place(counts: dict[str, int], gpus_per_node: int, nodes: int, how: str) -> dict[str, tuple[int, ...]]:
    """Global GPU indices of each submodule for ``counts`` (name -> GPUs) under ``how`` (module docstring)."""
    if how in ("separate_nodes", "packed"):
        out, start = {}, 0
        for name, n in counts.items():
            out[name] = tuple(range(start, start + n))
            start += n
        return out
    if how == "spread":
        return _spread(counts, gpus_per_node, nodes)
    if how != "same_node":
        raise ValueError(how)
    bad = [f"{k} ({v})" for k, v in counts.items() if v % nodes]
    if bad:
        raise UserError(f"placement same_node needs every submodule's GPU count to be a multiple of the node count "
                        f"({nodes}): {', '.join(bad)}", key_path="multimodal.placement")
    out = {name: [] for name in counts}
    for node in range(nodes):
        start = node * gpus_per_node
        for name, n in counts.items():
            share = n // nodes
            out[name] += range(start, start + share)
            start += share
    return {k: tuple(v) for k, v in out.items()}


def _spread(counts: dict[str, int], gpus_per_node: int, nodes: int) -> dict[str, tuple[int, ...]]:
    """Each submodule's n GPUs over every node as evenly as it goes (n // nodes each, one more on n % nodes of
    them, the extra GPUs dealt round the nodes so that every node fills up)."""
    per_node = {name: [n // nodes] * nodes for name, n in counts.items()}
    turn = 0
    for name, n in counts.items():
        for _ in range(n % nodes):
            per_node[name][turn % nodes] += 1
            turn += 1
    out = {name: [] for name in counts}
    for node in range(nodes):
        start = node * gpus_per_node
        for name in counts:
            k = per_node[name][node]
            out[name] += range(start, start + k)
            start += k
    return {k: tuple(v) for k, v in out.items()}


def feasible_placements(counts: dict[str, int], nodes: int, how: str) -> list[str]:
    """The placements ``how`` allows for these counts (``auto``: both where same_node divides evenly)."""
    if how != "auto":
        return [how]
    out = ["separate_nodes"]
    if nodes > 1 and all(v % nodes == 0 for v in counts.values()):
        out.append("same_node")
    return out


def per_node_counts(topology: Topology, gpus: tuple[int, ...]) -> list[int]:
    """How many of ``gpus`` sit on each node (NVLink domain) they touch, in node order."""
    counts = Counter(topology.domain_of(topology.gpus[g]) for g in gpus)
    return [counts[k] for k in sorted(counts)]
