"""simulator.arrays.distinct: np.unique's values without its masked-array check (and without importing numpy.ma)."""

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from simulator.arrays import distinct


@given(hnp.arrays(st.sampled_from([np.int64, np.float64]), st.integers(0, 40),
                  elements=st.integers(-5, 5)))
def test_distinct_is_np_unique(a):
    got = distinct(a)
    assert got.dtype == a.dtype
    assert np.array_equal(got, np.unique(a))


def test_distinct_by_hand():
    assert distinct(np.array([3, 1, 3, 2, 1])).tolist() == [1, 2, 3]
    assert distinct(np.array([], dtype=np.int64)).tolist() == []
    assert distinct(np.array([7.5])).tolist() == [7.5]


def test_distinct_does_not_import_numpy_ma():
    code = ("import sys, numpy as np; from simulator.arrays import distinct; distinct(np.array([2, 1, 2])); "
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
