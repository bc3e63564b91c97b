"""The sampled routing's fast paths (issue 27, item 7) select what the plain computation selects."""

import numpy as np

from simulator.moe.sampling import _gumbel, _top_in_kept, sample_topk


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
