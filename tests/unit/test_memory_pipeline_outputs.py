"""Megatron's stage-output deallocation (``parallel.deallocate_pipeline_outputs``; deallocate_output_tensor in
megatron/core/pipeline_parallel/schedules.py at d98e8a64): kept outputs counted by hand (issue 28 item 3)."""

import pytest

from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.model import ModelSpec
from simulator.plan import resolve_plan

GPT = ModelSpec(layers=16, hidden=1024, heads=16, vocab=50304)
OUT = 2 * 1024 * 1 * 1024   # one stage output: bf16 x s 1024 x b 1 x h 1024 = 2 MiB


def _outputs(parallel, deallocate=False):
    rp = resolve_plan(GPT, parallel | {"deallocate_pipeline_outputs": deallocate},
                      {"seq_len": 1024, "global_batch": 8}, 4 * parallel.get("tp", 1))
    return [sum(i.bytes for i in st.items if i.name == "pipeline.stage_outputs") for st in estimate_memory(rp).stages]


def test_1f1b_keeps_one_output_per_micro_batch_in_flight_except_on_the_last_stage():
    """pp 4, m 8: ranks 0-2 hold 4, 3, 2 micro-batches in flight (min(p - i, m)), each keeping its 2 MiB output;
    rank 3's output is the loss: 8, 6, 4, 0 MiB. Deallocated (the default, as Megatron-LM's training loop sets it):
    none."""
    assert _outputs({"pp": 4}) == [4 * OUT, 3 * OUT, 2 * OUT, 0]
    assert _outputs({"pp": 4}, deallocate=True) == [0, 0, 0, 0]


def test_interleaved_keeps_one_output_per_chunk_forward():
    """pp 4, vpp 2, m 8: Megatron's warm-up (p - i - 1) 2 + (v - 1) p, +1: 11, 9, 7, 5 chunk forwards alive; on
    rank 3 the warm-up's 4 are non-final chunks and the one after it is the loss: 22, 18, 14, 8 MiB."""
    assert _outputs({"pp": 4, "vpp": 2}) == [11 * OUT, 9 * OUT, 7 * OUT, 4 * OUT]


def test_sequence_parallel_shards_the_output():
    """tp 2 with sp: the output is the sequence shard, s/2 x b x h x 2 B = 1 MiB; rank 0 keeps 4 of them."""
    assert _outputs({"pp": 4, "tp": 2, "sp": True})[0] == 4 * OUT / 2


def test_outside_megatron_is_refused():
    with pytest.raises(UserError, match="deallocate_pipeline_outputs"):
        resolve_plan(GPT, {"pp": 4, "deallocate_pipeline_outputs": False},
                     {"global_batch": 8, "framework": "pytorch"}, 4)
