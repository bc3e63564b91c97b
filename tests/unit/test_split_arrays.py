"""The split schedules' integer columns (simulator/plan/split_arrays.py) against their op orders
(Schedule.split_orders, which the replay runs): every op's kind, phase, micro-batches and split flag, and every
input it waits for resolved to the op that posts it, for random (schedule, pp, m) within the schedules' rules."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.plan.schedules import SCHEDULES
from simulator.plan.split_arrays import KIND, orders_columns

SPLIT = ("zb1p", "zbv", "dualpipe", "dualpipev")


def _from_orders(schedule, pp: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The columns read off the DualOp orders: a poster per posted key, a wait resolved through it."""
    orders = schedule.split_orders(pp, m)
    start = np.cumsum([0] + [len(o) for o in orders])
    n = int(start[-1])
    poster = {(i, *key): int(start[i]) + q for i, order in enumerate(orders) for q, op in enumerate(order)
              for key in op.posts}
    flat = [op for order in orders for op in order]
    width = max(1, max(len(op.waits) for op in flat))
    waits = np.array([[poster[w] for w in op.waits] + [n] * (width - len(op.waits)) for op in flat],
                     dtype=np.int64).reshape(n, width)
    keys = np.array([(KIND[op.kind], op.phase, op.mb, op.b_phase, op.b_mb, op.split) for op in flat],
                    dtype=np.int64)
    return start, keys, waits


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SPLIT), st.integers(1, 6), st.integers(0, 9))
def test_columns_equal_the_op_orders(name: str, half: int, extra: int) -> None:
    schedule = SCHEDULES[name]
    pp = 2 * half if name == "dualpipe" else half + 1      # DualPipe: even pp (two halves of mirrored ranks)
    need = schedule.min_microbatches(pp)[0]
    m = need + (extra - extra % 2 if name == "dualpipe" else extra)
    start, keys, waits = _from_orders(schedule, pp, m)
    got = schedule.split_columns(pp, m)
    np.testing.assert_array_equal(got.start, start)
    np.testing.assert_array_equal(got.keys, keys)
    np.testing.assert_array_equal(got.waits, waits)
    default = orders_columns(schedule.split_orders(pp, m), pp, m)     # SplitSchedule's default, for new schedules
    np.testing.assert_array_equal(default.keys, keys)
    np.testing.assert_array_equal(default.waits, waits)


def test_zbv_rank_by_hand() -> None:
    """ZB-V, pp 2, m 3, rank 1 (zbv.py's order): F0; F1 F0; F1 B1 W; F0 B0 W F1 B1 W (m - 2p + i + 1 = 1 time);
    (B0 W F1 B1 W) x 0; B0 B1; B0 W; W W: the cool-down's first W runs the B0 of "B0 B1" (mb 1), then the
    B1 of that pair (mb 2), then the last B0 (mb 2)."""
    cols = SCHEDULES["zbv"].split_columns(2, 3)
    rank1 = cols.keys[cols.start[1]:cols.start[2], :3].tolist()
    assert rank1 == [[0, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 1], [1, 1, 0], [2, 1, 0], [0, 0, 2], [1, 0, 0],
                     [2, 0, 0], [0, 1, 2], [1, 1, 1], [2, 1, 1], [1, 0, 1], [1, 1, 2], [1, 0, 2], [2, 0, 1],
                     [2, 1, 2], [2, 0, 2]]
