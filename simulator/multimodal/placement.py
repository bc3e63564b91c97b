"""Which GPUs each submodule occupies (DistMM's heterogeneity-aware placement manager, section 4.3).

- ``separate_nodes``: submodules take consecutive GPUs in the order given, so a submodule whose GPU count is a
  multiple of the node size owns whole nodes; its TP and PP groups stay where the rank order puts them and the
  traffic between submodules crosses the network.
- ``same_node``: every node holds a share of every submodule (GPU count / nodes each), so the exchange between
  submodules stays on NVLink while each submodule's data-parallel groups span all nodes.
- ``packed``: consecutive GPUs in the order given, whatever the counts: a node boundary may split a submodule, so a
  submodule may take a fraction of a node and share it with the next (the data load balancer's uneven splits,
  :func:`simulator.multimodal.balance.distmm_plan`); a submodule spread unevenly over nodes is priced by
  :func:`even_view`.
- ``spread``: every submodule's GPUs over every node as evenly as its count allows (n // nodes, or one more), the
  uneven counterpart of ``same_node``: the exchange between submodules mostly stays on NVLink.
- ``auto`` (the placement manager): the faster of the two by the predicted step.

Traffic between submodules is priced pair by pair on the real links: on NVLink where the two GPUs share a node,
on the NICs otherwise (:func:`simulator.multimodal.evaluate.p2p_s`).
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


def _stand_in(topology: Topology, nodes: int) -> Topology:
    """``topology``'s cluster with ``nodes`` nodes, built once per topology and node count."""
    cache = topology.__dict__.setdefault("_stand_ins", {})
    if nodes not in cache:
        cache[nodes] = Topology(topology.cluster.model_copy(update={"nodes": nodes}))
    return cache[nodes]


def even_view(topology: Topology, gpus: tuple[int, ...]) -> tuple[Topology, tuple[int, ...]]:
    """Where a submodule's GPUs sit unevenly over nodes (a node boundary splits it: c_i GPUs on node i), the
    collectives model, which needs as many ranks on every node, prices it on a stand-in: the same number of GPUs
    spread evenly, g per node over n / g nodes of the same profile, with g = the largest divisor of n not above the
    fewest c_i. A ring over nodes crosses each node through the NICs next to that node's ranks, so the node holding
    the fewest sets the pace: the stand-in gives every node that many, or fewer where they do not divide n
    (assumption; pessimistic for the fuller nodes, whose NVLink hops are not the bottleneck, and more so for a
    count with no divisor near the fewest: 53 GPUs price as 53 nodes of one). Even sets and multi-node NVLink
    domains are returned as given."""
    counts = per_node_counts(topology, gpus)
    if len(set(counts)) <= 1 or topology.cluster.domain_nodes != 1:
        return topology, gpus
    g = max(d for d in range(1, min(counts) + 1) if len(gpus) % d == 0)
    per = topology.cluster.node.gpus
    stand_in = _stand_in(topology, len(gpus) // g)
    return stand_in, tuple(node * per + j for node in range(len(gpus) // g) for j in range(g))
