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
    equal = bool(np.all(log_p == log_p[0]))
    uniforms = np.empty((min(rows, n_tokens), experts)) if equal else None  # one buffer for every chunk's draws
    for start in range(0, n_tokens, rows):
        n = min(rows, n_tokens - start)
        if equal:
            u = rng.random(out=uniforms[:n])  # the same draws as rng.random(size=(n, experts))
            out[start:start + n] = _sample_equal(u, log_p[0], k, nodes, node_limit)
            continue
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
    return _gumbel_of(rng.random(size=shape))


def _gumbel_of(u: np.ndarray) -> np.ndarray:
    """The float32 Gumbel draws of uniforms ``u`` (:func:`_gumbel`)."""
    return (-np.log(-np.log(1.0 - u))).astype(np.float32)


def _sample_equal(u: np.ndarray, log_p: np.float32, k: int, nodes: int, node_limit: int | None) -> np.ndarray:
    """:func:`sample_topk`'s selection for one chunk of uniforms ``u`` (n, experts) when every expert has the same
    weight: a score ``log_p + gumbel(u)`` never increases as u grows (the draw is ``-log(-log(1 - u))``), so the k
    smallest u hold the top k scores unless the k-th score ties the next; the scores are computed only at that boundary (and in full for the rows
    where it ties, which take the plain path). The same expert sets as the plain path, in another order."""
    n, experts = u.shape
    per_node = experts // nodes
    if node_limit is None:
        if k >= experts:
            return np.argpartition(-(log_p + _gumbel_of(u)), k - 1, axis=1)[:, :k]
        out, tied = _top_of_uniforms(u, log_p, k)
        if tied.size:
            out[tied] = np.argpartition(-(log_p + _gumbel_of(u[tied])), k - 1, axis=1)[:, :k]
        return out
    grouped = u.reshape(n, nodes, per_node)
    best = log_p + _gumbel_of(grouped.min(axis=2))  # each node's best score: the score of its smallest uniform
    order = np.argpartition(-best, node_limit - 1, axis=1)
    kept = order[:, :node_limit]
    if k >= node_limit * per_node:  # the plain path's own cases (whole kept nodes, or reaching into dropped ones)
        scores = log_p + _gumbel_of(u)
        if k > node_limit * per_node:
            np.put_along_axis(scores.reshape(n, nodes, per_node), order[:, node_limit:, None], -np.inf, axis=1)
            return np.argpartition(-scores, k - 1, axis=1)[:, :k]
        return _top_in_kept(scores.reshape(n, nodes, per_node), kept, k)
    node_rows = (np.arange(n)[:, None] * nodes + kept).ravel()  # the kept nodes as rows of u viewed (n * nodes, per)
    candidates = np.take(u.reshape(n * nodes, per_node), node_rows, axis=0).reshape(n, -1)
    top, tied = _top_of_uniforms(candidates, log_p, k)
    out = np.take_along_axis(kept, top // per_node, axis=1) * per_node + top % per_node
    if tied.size:
        out[tied] = _top_in_kept((log_p + _gumbel_of(u[tied])).reshape(tied.size, nodes, per_node), kept[tied], k)
    return out


#: :func:`_top_of_uniforms` keeps, per row, the uniforms below ``_SPAN * (k + 1) / columns`` (about 2.5 (k + 1) of
#: them; a row with fewer than k + 1 is partitioned whole)
_SPAN = 2.5


def _top_of_uniforms(u: np.ndarray, log_p: np.float32, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(columns of each row's k smallest u, the rows for which those may not be the top k scores
    ``log_p + gumbel(u)``: the k-th score ties the (k+1)-th); needs k < columns.

    Only the uniforms below a threshold (about 2.5 (k + 1) per row) are partitioned: the k + 1 smallest of a row are
    among them whenever it has k + 1 of them (rows with fewer are partitioned whole). Which k a row keeps is decided
    by the float64 u; the scores (float32) are computed for those k and the (k+1)-th only."""
    n, columns = u.shape
    flat = np.flatnonzero(u < min(1.0, _SPAN * (k + 1) / columns))
    rows = flat // columns
    counts = np.bincount(rows, minlength=n)
    width = max(int(counts.max()), k + 1)
    at = np.arange(flat.size) + np.repeat(np.arange(n) * width - (np.cumsum(counts) - counts), counts)
    padded = np.full(n * width, 2.0)  # above every uniform
    padded[at] = u.ravel()[flat]
    cols = np.zeros(n * width, dtype=np.int64)
    cols[at] = flat - rows * columns
    part = np.argpartition(padded.reshape(n, width), k, axis=1)
    picked = cols[(np.arange(n) * width)[:, None] + part[:, :k + 1]]
    short = np.flatnonzero(counts <= k)
    if short.size:  # rows without k + 1 candidates: partitioned whole
        picked[short] = np.argpartition(u[short], k, axis=1)[:, :k + 1]
    top, after = picked[:, :k], picked[:, k]
    flat_top = np.arange(n)[:, None] * columns + top  # row-major flat indices: cheaper than take_along_axis
    kth = (log_p + _gumbel_of(u.ravel()[flat_top])).min(axis=1)
    next_score = log_p + _gumbel_of(u.ravel()[flat_top[:, 0] - top[:, 0] + after])
    return top, np.flatnonzero(kth <= next_score)


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
