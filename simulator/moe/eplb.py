"""EPLB: redundant experts placed to balance the EP ranks' load (deepseek-ai/EPLB, global policy).

DeepSeek's expert-parallel load balancer (deepseek-ai/EPLB ``eplb.py``, README "Global Load Balancing") takes each
logical expert's load and ``R`` redundant slots and decides, in two greedy steps:
1. replication: each redundant slot goes, one at a time, to the expert whose load per replica is then the largest
   (so the hottest experts get copies first, and a copy halves, thirds, ... its per-replica load);
2. packing: the ``E + R`` replicas, heaviest first, each go to the least-loaded EP rank that still has a free slot
   (every rank holds ``(E + R) / ep``).
A token routed to an expert picks one of its replicas; the engines spread the tokens evenly over them, so each replica
carries ``load / replicas``. (The README's hierarchical policy first packs expert groups onto nodes, for node-limited
routing; only the global policy is modelled.)

:func:`eplb_slots` returns each physical slot's share of the routing probability in rank-major order, which the
routing model (:func:`simulator.moe.route`) treats as ``E + R`` experts: a rank's load, its expert GEMMs and the
traffic to it follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.errors import UserError


@dataclass(frozen=True)
class EplbPlacement:
    """The physical slots of ``E + R`` replicas on ``ep`` ranks (slot s is on rank ``s // slots_per_rank``).

    Attributes:
        expert: (E + R,) the logical expert each slot holds.
        weights: (E + R,) each slot's share of the routing probability (sums to 1).
        replicas: (E,) replicas of each logical expert.
    """

    expert: np.ndarray
    weights: np.ndarray
    replicas: np.ndarray
    ep: int

    @property
    def rank_load(self) -> np.ndarray:
        """(ep,) share of the routed tokens each rank's slots receive."""
        return self.weights.reshape(self.ep, -1).sum(axis=1)


def replicate(load: np.ndarray, redundant: int) -> np.ndarray:
    """Replicas per expert after giving ``redundant`` extra slots, each to the expert with the largest load per
    replica (ties: the lowest id)."""
    replicas = np.ones(load.size, dtype=int)
    for _ in range(redundant):
        replicas[int(np.argmax(load / replicas))] += 1
    return replicas


def eplb_slots(p: np.ndarray, redundant: int, ep: int) -> EplbPlacement:
    """Place the replicas of experts with routing probabilities ``p`` on ``ep`` ranks (module docstring)."""
    experts = p.size
    slots = experts + redundant
    if redundant < 0:
        raise UserError(f"redundant experts must be >= 0, got {redundant}", key_path="redundant_experts")
    if slots % ep:
        raise UserError(f"{experts} experts + {redundant} redundant = {slots} slots do not split evenly over EP {ep}",
                        key_path="redundant_experts")
    replicas = replicate(p, redundant)
    owner = np.repeat(np.arange(experts), replicas)
    share = p[owner] / replicas[owner]
    per_rank = slots // ep
    load, used = np.zeros(ep), np.zeros(ep, dtype=int)
    placed: list[list[int]] = [[] for _ in range(ep)]
    for i in np.argsort(-share, kind="stable"):
        free = np.flatnonzero(used < per_rank)
        rank = int(free[np.argmin(load[free])])
        placed[rank].append(int(i))
        load[rank] += share[i]
        used[rank] += 1
    order = np.array([i for rank in placed for i in rank])
    return EplbPlacement(owner[order], share[order], replicas, ep)
