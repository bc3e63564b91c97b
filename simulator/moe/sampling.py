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
        scores = log_p + rng.gumbel(size=(n, experts)).astype(np.float32)
        if node_limit is not None:
            grouped = scores.reshape(n, nodes, experts // nodes)
            best = grouped.max(axis=2)
            drop = np.argpartition(-best, node_limit - 1, axis=1)[:, node_limit:]
            np.put_along_axis(grouped, drop[:, :, None], -np.inf, axis=1)
            scores = grouped.reshape(n, experts)
        out[start:start + n] = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return out
