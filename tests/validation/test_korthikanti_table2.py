"""Korthikanti et al., MLSys'23, Table 2: activation bytes per transformer layer, every row, symbolically.

The per-layer accounting sums the tensors each op keeps (Sec. 4.1); these tests check the sums equal the
published closed forms for any s, b, h, a, t (16-bit activations, 1-byte dropout masks, unfused attention).
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.memory import ActContext, layer_activation_bytes
from simulator.model import ModelSpec

ROWS = {
    # name: (tp_used, sp, recompute, formula(s, b, h, a, t))
    "no parallelism": (False, False, "none", lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    "tensor parallel": (True, False, "none", lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    "tensor + sequence parallel": (True, True, "none", lambda s, b, h, a, t: s * b * h * (34 / t + 5 * a * s / (h * t))),
    "tensor parallel + selective recompute": (True, False, "selective", lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    "tensor + sequence parallel + selective recompute": (True, True, "selective", lambda s, b, h, a, t: s * b * h * 34 / t),
    "full recompute": (True, False, "full", lambda s, b, h, a, t: 2 * s * b * h),
}


@settings(max_examples=40, deadline=None)
@given(row=st.sampled_from(sorted(ROWS)), heads_per_rank=st.integers(1, 16), head_dim=st.sampled_from([64, 128]),
       t=st.sampled_from([1, 2, 4, 8]), s_units=st.integers(1, 64), b=st.integers(1, 8))
def test_table2_row_exact(row, heads_per_rank, head_dim, t, s_units, b):
    tp_used, sp, recompute, formula = ROWS[row]
    t = t if tp_used else 1
    if sp and t == 1:
        t = 2
    a = heads_per_rank * t
    h = a * head_dim
    s = 64 * s_units
    model = ModelSpec(layers=1, hidden=h, heads=a, vocab=1000, linear_bias=True, position_embedding="learned",
                      dropout=0.1)
    ctx = ActContext.build(model, seq_len=s, micro_batch=b, tp=t, sp=sp, recompute=recompute, attention="unfused")
    assert layer_activation_bytes(model, ctx) == pytest.approx(formula(s, b, h, a, t), rel=1e-12)


def test_table2_22b_numbers():
    """The 22B model of Table 3 (h 6144, a 64, s 2048, b 4, t 8): 26.33*s*b*h per layer with TP only."""
    model = ModelSpec(layers=1, hidden=6144, heads=64, vocab=51200, dropout=0.1)
    sbh = 2048 * 4 * 6144
    ctx = ActContext.build(model, seq_len=2048, micro_batch=4, tp=8, attention="unfused")
    assert layer_activation_bytes(model, ctx) / sbh == pytest.approx(10 + 24 / 8 + 5 * 64 * 2048 / (6144 * 8))


def test_flash_attention_removes_the_s2_term_and_keeps_the_logsumexp():
    """Flash attention keeps no s x s tensor: the selective-recompute row plus an fp32 logsumexp (4*a*s*b/t)."""
    s, b, h, a, t = 4096, 2, 4096, 32, 4
    model = ModelSpec(layers=1, hidden=h, heads=a, vocab=1000, dropout=0.1)
    flash = layer_activation_bytes(model, ActContext.build(model, seq_len=s, micro_batch=b, tp=t, sp=True, attention="flash"))
    assert flash == pytest.approx(s * b * h * 34 / t + 4 * a * s * b / t, rel=1e-12)
