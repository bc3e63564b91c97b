"""Plan rules added with the step-time engine (the schedule relies on them)."""

import pytest

from simulator.errors import UserError
from simulator.model import load_model_preset
from simulator.plan import resolve_plan


def test_interleaved_schedule_needs_microbatches_multiple_of_pp():
    with pytest.raises(UserError) as exc:
        resolve_plan(load_model_preset("gpt3-175b"), {"tp": 8, "pp": 8, "vpp": 2},
                     {"global_batch": 12, "micro_batch": 1}, 64)
    assert exc.value.key_path == "training.global_batch"
    assert "interleaved schedule (vpp 2) needs the micro-batch count" in exc.value.message
    assert "= 12 to be a multiple of pp (8)" in exc.value.message
