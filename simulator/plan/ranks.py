"""Rank groups of every parallel dimension from one reshaped rank grid (Megatron ``RankGenerator``).

The rank order lists dimensions fastest-varying first: with ``tp-cp-ep-dp-pp`` consecutive ranks form a TP group.
Dense layers use the grid (tp, cp, ulysses, dp, pp) and expert layers the grid (etp, ep, edp, pp) in the same
order (Megatron-Core ``parallel_state.initialize_model_parallel``: expert grid has cp = 1, tp = etp, dp = edp).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.caching import memo

DENSE_DIMS = ("tp", "cp", "ulysses", "dp", "pp")
EXPERT_DIMS = ("etp", "ep", "edp")
COMBINED = {"dp_cp": ("cp", "ulysses", "dp")}
"""Named combined groups: ``dp_cp`` is the group ZeRO / the distributed optimizer shards dense states over."""
ALL_DIMS = DENSE_DIMS + EXPERT_DIMS + tuple(COMBINED)


def grid_groups(order: tuple[str, ...], sizes: dict[str, int], dims: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """Groups of ranks that differ only along ``dims`` of a grid laid out in ``order`` (fastest first).

    Args:
        order: dimension names, fastest-varying first.
        sizes: size of each name in ``order``.
        dims: the dimensions spanned by one group.

    Returns:
        One ascending tuple of global ranks per group; every rank appears in exactly one group.
    """
    return _grid_groups(tuple(order), tuple(sizes[d] for d in order), tuple(dims))


@memo(maxsize=256)
def _grid_groups(order: tuple[str, ...], sizes: tuple[int, ...], dims: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """:func:`grid_groups` by value (``sizes`` in ``order``): plans of one rank layout (a plan search's many
    micro-batches, shardings and recompute modes) share their groups."""
    shape = list(reversed(sizes))                        # C order: last axis varies fastest
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    rev = list(reversed(order))
    inner = [rev.index(d) for d in dims]
    outer = [i for i in range(len(rev)) if i not in inner]
    size = int(np.prod([shape[i] for i in inner])) if inner else 1
    groups = np.sort(grid.transpose(outer + inner).reshape(-1, size), axis=1)
    return tuple(map(tuple, groups.tolist()))  # Python ints, as the rest of the plan holds ranks


def group_containing(order: tuple[str, ...], sizes: dict[str, int], dims: tuple[str, ...], rank: int
                     ) -> tuple[int, ...]:
    """The one group of :func:`grid_groups` that holds ``rank``, computed alone: the ranks that differ from it only
    along ``dims`` (an axis' stride is the product of the sizes before it in ``order``, fastest first)."""
    stride, acc = {}, 1
    for d in order:
        stride[d], acc = acc, acc * sizes[d]
    ranks = [rank - sum(rank // stride[d] % sizes[d] * stride[d] for d in dims)]
    for d in dims:
        ranks = [r + k * stride[d] for r in ranks for k in range(sizes[d])]
    return tuple(sorted(ranks))


@dataclass(frozen=True)
class RankGrid:
    """The rank order and the dense and expert grid sizes (``ResolvedPlan.rank_layout``): with the world size,
    everything that fixes every rank group, as a hashable value (plans that differ in nothing else share it)."""

    order: tuple[str, ...]
    dense: tuple[tuple[str, int], ...]
    expert: tuple[tuple[str, int], ...]
    world_size: int

    def group_of(self, dim: str, rank: int) -> tuple[int, ...]:
        """The ``dim`` group (a name of :data:`ALL_DIMS`) holding global rank ``rank``."""
        if dim in EXPERT_DIMS:
            sizes, axes = dict(self.expert), ({"etp": "tp", "ep": "ep", "edp": "dp"}[dim],)
        elif dim in DENSE_DIMS:
            sizes, axes = dict(self.dense), (dim,)
        elif dim in COMBINED:
            sizes, axes = dict(self.dense), COMBINED[dim]
        else:
            raise KeyError(f"unknown group dimension {dim!r}; known: {', '.join(ALL_DIMS)}")
        return group_containing(self.order, sizes, axes, rank)
