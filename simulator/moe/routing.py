"""Routing model: which expert each token of each EP rank goes to, and what that means per peer.

Two modes with one result type, :class:`Routing`:

- ``seed=None``: the expected ("fluid") routing. Fractional token counts from inclusion probabilities, no sampling
  noise, deterministic and smooth in every input (a skew sweep moves monotonically).
- ``seed=int``: sampled routing, the way DeepEP's tests route (random scores, top-k, node-limited by group maxima),
  with integer counts; rank loads then carry the random imbalance a real batch has.

Experts are placed contiguously: rank r holds experts ``r*E/ep .. (r+1)*E/ep - 1``; ranks are node-major (rank //
ranks_per_node is the node). Under ``zipf`` the most popular experts are the lowest ids, i.e. on rank 0 (the
unbalanced placement; pass a ``histogram`` for another one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, comb

import numpy as np

from simulator.errors import UserError
from simulator.limits import MAX_EXPERTS, MAX_SAMPLED_SCORES
from simulator.moe.sampling import sample_topk
from simulator.moe.waterfill import waterfill


@dataclass(frozen=True)
class Routing:
    """Token traffic of one micro-batch of a MoE layer on ``ep`` ranks (arrays indexed [source rank, ...]).

    Attributes:
        tokens: tokens per rank in the micro-batch (each rank routes its own ``tokens``).
        expert_tokens: (ep, experts) selections each source sends to each expert, after drops (top-k copies).
        dropped: (ep, experts) selections dropped at the source for exceeding the capacity (0 when dropless).
        padding: (ep, experts) empty slots padded up to the capacity (0 when dropless).
        rank_tokens: (ep, ep) distinct tokens each source sends to each rank (a token going to two experts of
            one rank counts once: DeepEP's per-rank deduplication).
        node_tokens: (ep, nodes) distinct tokens each source sends to each node.
        capacity: tokens per expert per source rank (None = dropless).
    """

    tokens: int
    top_k: int
    experts: int
    ep: int
    ranks_per_node: int
    capacity: float | None
    expert_tokens: np.ndarray
    dropped: np.ndarray
    padding: np.ndarray
    rank_tokens: np.ndarray
    node_tokens: np.ndarray

    @property
    def nodes(self) -> int:
        return self.ep // self.ranks_per_node

    @property
    def experts_per_rank(self) -> int:
        return self.experts // self.ep

    @property
    def selections(self) -> np.ndarray:
        """(ep, ep) expert copies each source sends to each rank (what an all-to-all of permuted tokens moves)."""
        return self.expert_tokens.reshape(self.ep, self.ep, self.experts_per_rank).sum(axis=2)

    @property
    def padded_selections(self) -> np.ndarray:
        """(ep, ep) slots each source sends to each rank with capacity padding (fixed-size all-to-all)."""
        slots = self.expert_tokens + self.padding
        return slots.reshape(self.ep, self.ep, self.experts_per_rank).sum(axis=2)

    @property
    def expert_load(self) -> np.ndarray:
        """(ep, experts_per_rank) tokens each rank's local experts compute on (padding included): the expert GEMM
        row counts."""
        slots = (self.expert_tokens + self.padding).sum(axis=0)
        return slots.reshape(self.ep, self.experts_per_rank)

    @property
    def rank_load(self) -> np.ndarray:
        """(ep,) tokens each rank's experts process (sum of :attr:`expert_load`)."""
        return self.expert_load.sum(axis=1)

    @property
    def imbalance(self) -> float:
        """Load imbalance factor: the busiest rank's expert tokens over the mean (1.0 = perfectly balanced)."""
        load = self.rank_load
        mean = float(load.mean())
        return float(load.max()) / mean if mean > 0 else 1.0

    @property
    def dropped_tokens(self) -> float:
        return float(self.dropped.sum())

    @property
    def padded_tokens(self) -> float:
        return float(self.padding.sum())


def expert_weights(experts: int, distribution: str | Sequence[float] = "uniform",
                   zipf_exponent: float = 1.0) -> np.ndarray:
    """Per-expert routing probability p (sums to 1): uniform, Zipf (p_i ~ 1/(i+1)^s) or a given histogram."""
    if isinstance(distribution, str):
        if distribution == "uniform":
            return np.full(experts, 1.0 / experts)
        if distribution == "zipf":
            if zipf_exponent < 0:
                raise UserError(f"zipf exponent must be >= 0, got {zipf_exponent}", key_path="zipf_exponent")
            w = 1.0 / np.arange(1, experts + 1, dtype=float) ** zipf_exponent
            return w / w.sum()
        raise UserError(f"unknown routing distribution {distribution!r}; accepted: uniform, zipf, or a histogram "
                        f"(one weight per expert)", key_path="distribution")
    w = np.asarray(distribution, dtype=float)
    if w.shape != (experts,) or (w < 0).any() or w.sum() <= 0:
        raise UserError(f"a routing histogram needs {experts} non-negative weights (one per expert) with a positive "
                        f"sum, got shape {w.shape}", key_path="distribution")
    return w / w.sum()


def _check(tokens: int, top_k: int, experts: int, ep: int, ranks_per_node: int, node_limit: int | None) -> int:
    if tokens < 0 or top_k < 1 or experts < 1 or ep < 1:
        raise UserError(f"need tokens >= 0, top_k >= 1, experts >= 1, ep >= 1; got tokens={tokens}, top_k={top_k}, "
                        f"experts={experts}, ep={ep}")
    if top_k > experts:
        raise UserError(f"top_k ({top_k}) exceeds the number of experts ({experts})", key_path="top_k")
    if experts > MAX_EXPERTS:
        raise UserError(f"{experts:,} experts; the simulator models at most {MAX_EXPERTS:,}", key_path="experts")
    if experts % ep:
        raise UserError(f"{experts} experts do not split evenly over EP {ep} (experts % ep must be 0)",
                        key_path="experts")
    if ep % ranks_per_node:
        raise UserError(f"EP {ep} is not a multiple of {ranks_per_node} ranks per node", key_path="ep")
    nodes = ep // ranks_per_node
    if node_limit is not None and not 1 <= node_limit:
        raise UserError(f"node limit (top-k groups) must be >= 1, got {node_limit}", key_path="topk_groups")
    if node_limit is not None and node_limit < nodes and node_limit * (experts // nodes) < top_k:
        raise UserError(f"{node_limit} nodes of {experts // nodes} experts each cannot hold top_k={top_k} experts",
                        key_path="topk_groups")
    return nodes


def route(tokens: int, top_k: int, experts: int, ep: int, *, distribution: str | Sequence[float] = "uniform",
          zipf_exponent: float = 1.0, node_limit: int | None = None, ranks_per_node: int | None = None,
          capacity_factor: float | None = None, seed: int | None = None) -> Routing:
    """Route ``tokens`` tokens per rank, ``top_k`` experts each, over ``experts`` experts on ``ep`` ranks.

    Args:
        distribution: ``uniform``, ``zipf`` (with ``zipf_exponent``) or per-expert weights.
        node_limit: each token goes to experts on at most this many nodes (DeepSeek-V3 group-limited routing: the
            nodes whose best expert scores highest, then top-k among their experts). None: no limit.
        ranks_per_node: EP ranks per node (default: min(ep, 8)).
        capacity_factor: None = dropless (ragged). Else capacity C = ceil(cf * tokens * top_k / experts) slots per
            expert per source rank (Megatron's per-rank capacity); selections beyond C are dropped at the source
            (position policy: later tokens first) and experts with fewer are padded up to C.
        seed: None = expected counts (fluid); an int = one sampled batch.
    """
    rpn = ranks_per_node or min(ep, 8)
    nodes = _check(tokens, top_k, experts, ep, rpn, node_limit)
    if seed is not None and tokens * ep * experts > MAX_SAMPLED_SCORES:
        raise UserError(f"a seeded routing draws {tokens:,} tokens x EP {ep} x {experts} experts = "
                        f"{tokens * ep * experts:,} scores, more than {MAX_SAMPLED_SCORES:,} (docs/errors.md); "
                        "without a seed the expected counts have no limit", key_path="seed")
    limit = node_limit if node_limit is not None and node_limit < nodes else None
    p = expert_weights(experts, distribution, zipf_exponent)
    if capacity_factor is not None and capacity_factor <= 0:
        raise UserError(f"capacity factor must be > 0 (or null for dropless), got {capacity_factor}",
                        key_path="capacity_factor")
    capacity = None if capacity_factor is None else float(ceil(capacity_factor * tokens * top_k / experts))
    if seed is None:
        parts = _fluid(tokens, top_k, p, ep, rpn, limit, capacity, uniform=_is_uniform(distribution))
    else:
        parts = _sampled(tokens, top_k, p, ep, rpn, limit, capacity, seed)
    return Routing(tokens, top_k, experts, ep, rpn, capacity, *parts)


def _is_uniform(distribution) -> bool:
    return isinstance(distribution, str) and distribution == "uniform"


def _hit_exact(experts: int, group: int, k: int) -> float:
    """P(a token's k distinct uniform experts include one of a given ``group`` experts) (hypergeometric)."""
    return 1.0 - comb(experts - group, k) / comb(experts, k)


def _fluid(tokens, k, p, ep, rpn, limit, capacity, uniform):
    """Expected counts from inclusion probabilities (pi sums to k over the experts).

    Unlimited: pi is water-filled p (pi_e = min(1, c p_e)); hits assume independence, except uniform routing, which
    uses the exact hypergeometric probabilities. Node-limited (M nodes): node inclusion q is the water-filled node
    mass (sum M); a selected node's best expert is almost always in the token's top-k (its score beats the other
    nodes' best), so each selected node gets one expert in proportion to p inside the node, and the remaining k - M
    are water-filled over the selected nodes' experts.
    """
    experts, nodes = p.size, ep // rpn
    epr, epn = experts // ep, experts // nodes
    if limit is None:
        pi = waterfill(p, k, np.ones(experts))
        if uniform:
            hit_rank = np.full(ep, _hit_exact(experts, epr, k))
            hit_node = np.full(nodes, _hit_exact(experts, epn, k))
        else:
            hit_rank, hit_node = _hits(pi, np.ones(ep), ep), _hits(pi, np.ones(nodes), nodes)
    else:
        pi, hit_rank, hit_node = _node_limited(p, k, limit, ep, nodes)
    sent = np.broadcast_to(tokens * pi, (ep, experts)).copy()
    dropped, padding = _capacity(sent, capacity)
    kept = sent - dropped
    keep_rank = _ratio(kept.reshape(ep, ep, epr).sum(2), sent.reshape(ep, ep, epr).sum(2))
    keep_node = _ratio(kept.reshape(ep, nodes, epn).sum(2), sent.reshape(ep, nodes, epn).sum(2))
    rank_tokens = tokens * hit_rank[None, :] * keep_rank
    node_tokens = tokens * hit_node[None, :] * keep_node
    return kept, dropped, padding, rank_tokens, node_tokens


def _node_limited(p: np.ndarray, k: int, limit: int, ep: int, nodes: int):
    """(pi, P(rank hit), P(node hit)) under group-limited routing (see :func:`_fluid`)."""
    experts = p.size
    epn, rpn = experts // nodes, ep // nodes
    node_mass = p.reshape(nodes, epn).sum(axis=1)
    q = waterfill(node_mass, limit, np.ones(nodes))
    share = np.divide(p.reshape(nodes, epn), node_mass[:, None], out=np.full((nodes, epn), 1.0 / epn),
                      where=node_mass[:, None] > 0)
    first = (q[:, None] * share).ravel()  # the guaranteed expert of each selected node
    extra_k = max(k - limit, 0)
    weights = p * np.repeat(np.divide(q, node_mass, out=np.zeros(nodes), where=node_mass > 0), epn)
    extra = waterfill(weights, extra_k, np.repeat(q, epn) - first) if extra_k else np.zeros(experts)
    pi = first + extra
    q_rank = np.repeat(q, rpn)
    first_rank = first.reshape(ep, -1).sum(axis=1)
    miss_first = 1.0 - np.divide(first_rank, q_rank, out=np.zeros(ep), where=q_rank > 0)
    inner = np.divide(extra.reshape(ep, -1), q_rank[:, None], out=np.zeros((ep, experts // ep)),
                      where=q_rank[:, None] > 0)
    hit_rank = q_rank * (1.0 - miss_first * np.prod(1.0 - np.clip(inner, 0.0, 1.0), axis=1))
    return pi, hit_rank, q if k >= limit else _hits(pi, q, nodes)


def _hits(pi: np.ndarray, q: np.ndarray, groups: int) -> np.ndarray:
    """P(group hit) = q * (1 - prod(1 - pi_e / q)) over the group's experts (independence approximation)."""
    inner = np.divide(pi.reshape(groups, -1), q[:, None], out=np.zeros((groups, pi.size // groups)),
                      where=q[:, None] > 0)
    return q * (1.0 - np.prod(1.0 - np.clip(inner, 0.0, 1.0), axis=1))


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.ones_like(a), where=b > 0)


def _capacity(sent: np.ndarray, capacity: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(dropped, padding) per (source, expert) for a per-source capacity (zeros when dropless)."""
    if capacity is None:
        return np.zeros_like(sent), np.zeros_like(sent)
    return np.maximum(sent - capacity, 0.0), np.maximum(capacity - sent, 0.0)


def _sampled(tokens, k, p, ep, rpn, limit, capacity, seed):
    experts, nodes = p.size, ep // rpn
    epr, epn = experts // ep, experts // nodes
    idx = sample_topk(ep * tokens, k, p, nodes, limit, np.random.default_rng(seed))  # (ep*tokens, k)
    src = np.repeat(np.arange(ep), tokens)[:, None]
    keep = _keep_mask(idx, src, experts, capacity)
    sent = _count(src * experts + idx, keep, ep * experts).reshape(ep, experts)
    total = _count(src * experts + idx, np.ones_like(keep), ep * experts).reshape(ep, experts)
    dropped = total - sent
    padding = np.zeros_like(sent) if capacity is None else np.maximum(capacity - sent, 0.0)
    rank_tokens = _distinct(idx // epr, keep, src, ep)
    node_tokens = _distinct(idx // epn, keep, src, nodes)
    return sent, dropped, padding, rank_tokens, node_tokens


def _count(keys: np.ndarray, mask: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(keys[mask], minlength=size).astype(float)


def _keep_mask(idx: np.ndarray, src: np.ndarray, experts: int, capacity: float | None) -> np.ndarray:
    """Selections within capacity: per (source, expert), the first C in token order are kept."""
    if capacity is None:
        return np.ones(idx.shape, dtype=bool)
    keys = (np.broadcast_to(src, idx.shape) * experts + idx).ravel()
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    position = np.arange(keys.size) - np.repeat(starts, np.diff(np.r_[starts, keys.size]))
    keep = np.empty(keys.size, dtype=bool)
    keep[order] = position < capacity
    return keep.reshape(idx.shape)


def _distinct(groups: np.ndarray, keep: np.ndarray, src: np.ndarray, n_groups: int) -> np.ndarray:
    """(ep, n_groups) distinct tokens per (source, group) among the kept selections."""
    g = np.where(keep, groups, -1)
    g.sort(axis=1)
    first = np.ones(g.shape, dtype=bool)
    first[:, 1:] = g[:, 1:] != g[:, :-1]
    mask = first & (g >= 0)
    keys = np.broadcast_to(src, g.shape)[mask] * n_groups + g[mask]
    return np.bincount(keys, minlength=src.max() * n_groups + n_groups).astype(float).reshape(-1, n_groups)
