"""The interleaved 1F1B schedule's in-flight micro-batches against Megatron-LM's own warm-up count (issue 28 item 3).

NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py at d98e8a64, ``get_pp_rank_microbatches``: with
interleaving, num_warmup = (pp - rank - 1) * 2 + (vpp - 1) * microbatch_group_size_per_vp_stage (the group size
defaults to pp), capped at total = m * vpp (then every virtual micro-batch is warm-up); the steady phase runs one
more forward before each backward, so at most min(num_warmup + 1, total) model-chunk forwards hold activations
(``max_outstanding_backprops = num_warmup_microbatches + 1`` in the same file). Each chunk holds 1/vpp of the
stage's layers, so the stage holds that count / vpp micro-batches' worth of its layers' activations.
"""

import pytest

from simulator.memory import estimate_memory, layer_activation_bytes
from simulator.memory.estimate import activation_context
from simulator.model import ModelSpec
from simulator.plan import resolve_plan
from simulator.plan.pipeline import in_flight, in_flight_walk


def megatron_outstanding(pp: int, vpp: int, rank: int, m: int, group: int | None = None) -> int:
    """Model-chunk forwards alive at once on ``rank`` (module docstring), transcribed from Megatron's rule."""
    total = m * vpp
    warmup = (pp - rank - 1) * 2 + (vpp - 1) * (group or pp)
    if warmup >= total:
        return total
    return warmup + 1


CASES = [  # (pp, vpp, m, rank, chunk forwards alive by hand)
    (4, 2, 8, 0, 11),    # 3*2 + 1*4 = 10 warm-up, +1
    (4, 2, 8, 3, 5),     # 0 + 4, +1
    (4, 4, 16, 1, 17),   # 2*2 + 3*4 = 16, +1
    (8, 2, 8, 0, 16),    # 7*2 + 8 = 22 >= 16 = m*vpp: capped, all warm-up
    (8, 3, 16, 5, 21),   # 2*2 + 2*8 = 20, +1
    (2, 2, 2, 0, 4),     # 2 + 2 = 4 >= 4: capped
    (16, 2, 32, 15, 17),  # 0 + 16, +1
]


@pytest.mark.parametrize("pp, vpp, m, rank, alive", CASES)
def test_in_flight_equals_megatron_warmup_plus_one(pp, vpp, m, rank, alive):
    assert megatron_outstanding(pp, vpp, rank, m) == alive
    assert in_flight("1f1b", pp, vpp, rank, m) == pytest.approx(alive / vpp)
    assert in_flight_walk("1f1b", pp, vpp, rank, m) == pytest.approx(alive / vpp)


def test_stage_activations_follow_the_count():
    """pp 4, vpp 2, m 8, a 16-layer GPT: each rank holds 4 layers in two chunks of 2. Rank 0 keeps 11 chunk
    forwards x 2 layers = 22 layers' activations (5.5 micro-batches of its 4 layers); rank 3 keeps 5 x 2 = 10."""
    gpt = ModelSpec(layers=16, hidden=1024, heads=16, vocab=50304)
    rp = resolve_plan(gpt, {"pp": 4, "vpp": 2}, {"seq_len": 1024, "global_batch": 8}, 4)
    report = estimate_memory(rp)
    per_layer = [sum(i.bytes for i in st.items if i.scaling == "in_flight") for st in report.stages]
    one_layer = layer_activation_bytes(gpt, activation_context(rp))
    assert per_layer[3] == pytest.approx(10 * one_layer)
    assert per_layer[0] == pytest.approx(22 * one_layer)
    assert per_layer[1] == pytest.approx(megatron_outstanding(4, 2, 1, 8) * 2 * one_layer)
