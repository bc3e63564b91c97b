"""Which GPUs each submodule occupies (DistMM's heterogeneity-aware placement manager, section 4.3).

- ``separate_nodes``: submodules take consecutive GPUs in the order given, so a submodule whose GPU count is a
  multiple of the node size owns whole nodes; its TP and PP groups stay where the rank order puts them and the
  traffic between submodules crosses the network.
- ``same_node``: every node holds a share of every submodule (GPU count / nodes each), so the exchange between
  submodules stays on NVLink while each submodule's data-parallel groups span all nodes.
- ``auto`` (the placement manager): the faster of the two by the predicted step.
"""

from __future__ import annotations

from simulator.errors import UserError


def place(counts: dict[str, int], gpus_per_node: int, nodes: int, how: str) -> dict[str, tuple[int, ...]]:
    """Global GPU indices of each submodule for ``counts`` (name -> GPUs) under ``how`` (module docstring)."""
    if how == "separate_nodes":
        out, start = {}, 0
        for name, n in counts.items():
            out[name] = tuple(range(start, start + n))
            start += n
        return out
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


def feasible_placements(counts: dict[str, int], nodes: int, how: str) -> list[str]:
    """The placements ``how`` allows for these counts (``auto``: both where same_node divides evenly)."""
    if how != "auto":
        return [how]
    out = ["separate_nodes"]
    if nodes > 1 and all(v % nodes == 0 for v in counts.values()):
        out.append("same_node")
    return out
