"""Sampled top-k routing, as DeepEP's tests route: per-token random scores, optional group (node) limit."""

from __future__ import annotations

import numpy as np

#: score elements generated at once (float32), to bound memory on large EP sweeps
_CHUNK_ELEMENTS = 1 << 22


def sample_topk(n_tokens: int, k: int, p: np.ndarray, nodes: int, node_limit: int | None,
                rng: np.random.Generator) -> np.ndarray:
    """(n_tokens, k) expert ids, distinct per token.

    Scores are ``log p + Gumbel`` (top-k of them is weighted sampling without replacement; with equal p it is the
    order of DeepEP's iid random scores). With a node limit M, a token first keeps the M nodes whose best expert
    scores highest (``group_scores = scores.view(tokens, nodes, -1).amax(-1)``, DeepEP test_internode.py), then
    takes its top-k among their experts.
    """
    experts = p.size
    log_p = np.log(np.where(p > 0, p, np.finfo(float).tiny)).astype(np.float32)
    rows = max(1, _CHUNK_ELEMENTS // experts)
    out = np.empty((n_tokens, k), dtype=np.int64)
    for start in range(0, n_tokens, rows):
        n = min(rows, n_tokens - start)
        scores = log_p + _gumbel(rng, (n, experts))
        if node_limit is None:
            out[start:start + n] = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            continue
        grouped = scores.reshape(n, nodes, experts // nodes)
        best = grouped.max(axis=2)
        kept = np.argpartition(-best, node_limit - 1, axis=1)
        if k > node_limit * (experts // nodes):  # the top-k reaches into dropped nodes (-inf): as DeepEP masks
            np.put_along_axis(grouped, kept[:, node_limit:, None], -np.inf, axis=1)
            out[start:start + n] = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            continue
        out[start:start + n] = _top_in_kept(grouped, kept[:, :node_limit], k)
    return out


def _gumbel(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """``rng.gumbel(size=shape).astype(float32)`` drawn 2x faster: the same uniforms (``Generator.gumbel`` is
    ``-log(-log(1 - random()))``), the logs vectorised (numpy's float64 log may differ from the C library's in the
    last bit, which the float32 scores do not keep; tests/unit/test_moe_sampling.py checks they agree)."""
    return (-np.log(-np.log(1.0 - rng.random(size=shape)))).astype(np.float32)


def _top_in_kept(grouped: np.ndarray, kept: np.ndarray, k: int) -> np.ndarray:
    """(n, k) expert ids: each row's top-k among the experts of its ``kept`` (n, M) nodes of ``grouped``
    (n, nodes, experts per node), on M/nodes of the scores. The same selection as masking the other nodes to -inf
    and partitioning the whole row: a row whose k-th score ties the next is partitioned that way (which of tied
    experts an argpartition keeps depends on the row it sees)."""
    n, nodes, per_node = grouped.shape
    candidates = np.take_along_axis(grouped, kept[:, :, None], axis=1).reshape(n, -1)
    top = np.argpartition(-candidates, k - 1, axis=1)[:, :k]
    out = np.take_along_axis(kept, top // per_node, axis=1) * per_node + top % per_node
    kth = np.take_along_axis(candidates, top, axis=1).min(axis=1)
    tied = np.flatnonzero((candidates >= kth[:, None]).sum(axis=1) > k)
    if tied.size:
        rows = grouped[tied].copy()
        dropped = np.ones((tied.size, nodes), dtype=bool)
        np.put_along_axis(dropped, kept[tied], False, axis=1)
        rows[dropped] = -np.inf
        out[tied] = np.argpartition(-rows.reshape(tied.size, -1), k - 1, axis=1)[:, :k]
    return out
