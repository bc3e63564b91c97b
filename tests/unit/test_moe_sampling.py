"""The sampled routing's fast paths (issue 27, item 7) select what the plain computation selects."""

import numpy as np
import pytest

from simulator.moe.sampling import _gumbel, _gumbel_of, _sample_equal, _top_in_kept, sample_topk


def _masked(grouped, kept):
    rows = grouped.copy()
    dropped = np.ones(grouped.shape[:2], dtype=bool)
    np.put_along_axis(dropped, kept, False, axis=1)
    rows[dropped] = -np.inf
    return rows.reshape(len(rows), -1)


def test_gumbel_draws_are_the_generators():
    assert np.array_equal(_gumbel(np.random.default_rng(3), (512, 256)),
                          np.random.default_rng(3).gumbel(size=(512, 256)).astype(np.float32))


def test_top_k_in_kept_nodes_matches_masking_with_ties():
    """Scores rounded to a coarse grid tie often at the k-th place; the selection is still the masked one's."""
    rng = np.random.default_rng(0)
    grouped = np.round(rng.normal(size=(4000, 8, 32)), 1).astype(np.float32)
    kept = np.argpartition(-grouped.max(axis=2), 3, axis=1)[:, :4]
    fast = np.sort(_top_in_kept(grouped, kept, 8), axis=1)
    masked = _masked(grouped, kept)
    assert np.array_equal(fast, np.sort(np.argpartition(-masked, 7, axis=1)[:, :8], axis=1))
    chosen = np.take_along_axis(masked, fast, axis=1)
    assert np.array_equal(np.sort(chosen, axis=1), np.sort(masked, axis=1)[:, -8:])  # the 8 best, all in kept nodes


def test_node_limited_sample_stays_in_its_nodes():
    idx = sample_topk(2048, 8, np.full(256, 1 / 256), 8, 2, np.random.default_rng(1))
    assert all(len(set(row // 32)) <= 2 and len(set(row)) == 8 for row in idx)


def _plain(u, log_p, k, nodes, node_limit):
    """The plain path on the scores of uniforms ``u``: all scores, node limit by masking."""
    scores = log_p + _gumbel_of(u)
    if node_limit is not None:
        grouped = scores.reshape(len(u), nodes, -1)
        kept = np.argpartition(-grouped.max(axis=2), node_limit - 1, axis=1)[:, :node_limit]
        scores = _masked(grouped, kept)
    return np.sort(np.argpartition(-scores, k - 1, axis=1)[:, :k], axis=1)


@pytest.mark.parametrize("grid", [None, 1e-3, 5e-2])
@pytest.mark.parametrize("nodes,node_limit", [(1, None), (8, None), (8, 2), (8, 4), (4, 1)])
def test_equal_weights_select_what_the_scores_select(grid, nodes, node_limit):
    """Uniforms on a coarse grid tie (and their scores tie) at the k-th place often: still the plain selection."""
    u = np.random.default_rng(7).random(size=(3000, 256))
    if grid is not None:
        u = np.clip(np.round(u / grid) * grid, grid, 1 - grid)
    log_p = np.log(np.float32(1 / 256))
    fast = np.sort(_sample_equal(u, log_p, 8, nodes, node_limit), axis=1)
    assert np.array_equal(fast, _plain(u, log_p, 8, nodes, node_limit))


def test_equal_weight_draws_match_the_plain_path():
    """sample_topk's equal-weight path against the plain one on the generator's own draws."""
    for nodes, limit in ((1, None), (8, 4)):
        idx = np.sort(sample_topk(4096, 8, np.full(256, 1 / 256), nodes, limit, np.random.default_rng(5)), axis=1)
        u = np.random.default_rng(5).random(size=(4096, 256))
        assert np.array_equal(idx, _plain(u, np.log(np.float32(1 / 256)), 8, nodes, limit))


def test_equal_weights_scores_tied_by_float32_rounding():
    """Distinct uniforms (distinct in float32 too) whose float32 scores tie at the k-th place: the plain selection."""
    rng = np.random.default_rng(11)
    u = 0.95 + 0.04 * rng.random(size=(2000, 64))
    close = 0.9 + 1e-7 * np.arange(10)  # distinct float32 uniforms; the 4th and 5th scores are the same float32
    for row in u:
        row[rng.permutation(64)[:10]] = close
    log_p = np.log(np.float32(1 / 64))
    scores = log_p + _gumbel_of(u)
    first = np.sort(scores[0])[::-1]
    assert len(np.unique(close.astype(np.float32))) == 10 and first[3] == first[4] and first[2] > first[3]
    fast = np.sort(_sample_equal(u, log_p, 4, 1, None), axis=1)
    assert np.array_equal(fast, _plain(u, log_p, 4, 1, None))


def test_rows_with_few_small_uniforms_are_partitioned_whole():
    """Rows with fewer than k + 1 uniforms under the candidate threshold (here every other row, its uniforms moved
    to [0.5, 1)) beside ordinary rows: each keeps its k smallest uniforms, as the plain path does."""
    u = np.random.default_rng(13).random(size=(2000, 256))
    u[::2] = 0.5 + 0.5 * u[::2]
    u[::4, :5] = 0.01 * np.arange(1, 6)  # 5 candidates only: still fewer than k + 1
    log_p = np.log(np.float32(1 / 256))
    fast = np.sort(_sample_equal(u, log_p, 8, 1, None), axis=1)
    assert np.array_equal(fast, _plain(u, log_p, 8, 1, None))
    assert np.array_equal(fast, np.sort(np.argsort(u, axis=1)[:, :8], axis=1))
