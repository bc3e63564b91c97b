"""Megatron activation CPU offload (``parallel.cpu_offloading_num_layers``, Megatron --cpu-offloading-num-layers over
Transformer Engine's CPU offload): memory only, checked by hand (issue 28 item 3)."""

import pytest

from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.model import ModelSpec
from simulator.plan import resolve_plan

GPT = ModelSpec(layers=16, hidden=1024, heads=16, vocab=50304)
S, H, A = 1024, 1024, 16
LAYER = 32 * S * H + 4 * S * A    # Megatron, flash, no dropout, b 1: eight 2sh tensors, two 8sh (GeLU in, fc2 in), lse
HEAD = 2 * 2 * S * H              # final norm input and output-layer input


def _acts(n, **parallel):
    rp = resolve_plan(GPT, {"cpu_offloading_num_layers": n} | parallel, {"seq_len": S, "global_batch": 8}, 1)
    return estimate_memory(rp).stages[0].bucket("activations")


def test_offloaded_layers_leave_the_gpu():
    """TE's OffloadSynchronizer offloads layers 0..N-1 and times each offload to finish before layer L - N + i runs
    forward, so the saved activations peak at (L - N) layers (transformer_engine/pytorch/cpu_offload.py at
    00382b96, _default_offload_sync_init). 16 layers x 33,619,968 + 4,194,304 = 542,113,792 B; with 12 offloaded
    4 x 33,619,968 + 4,194,304 = 138,674,176 B."""
    assert LAYER == 33_619_968
    assert _acts(0) == 16 * LAYER + HEAD == 542_113_792
    assert _acts(12) == 4 * LAYER + HEAD == 138_674_176


@pytest.mark.parametrize("parallel, training, rule", [
    ({"cpu_offloading_num_layers": 16}, {}, "below the model's layers"),
    ({"cpu_offloading_num_layers": 4, "pp": 2}, {}, "pipeline parallelism"),
    ({"cpu_offloading_num_layers": 4, "recompute": "full"}, {}, "recomputation"),
    ({"cpu_offloading_num_layers": 4}, {"framework": "pytorch"}, "framework megatron"),
])
def test_megatron_rules_are_enforced(parallel, training, rule):
    """Megatron-Core TransformerConfig.__post_init__ refuses these (transformer_config.py at d98e8a64)."""
    with pytest.raises(UserError, match=rule) as err:
        resolve_plan(GPT, parallel, {"global_batch": 8} | training, 2 if parallel.get("pp") else 1)
    assert err.value.key_path == "parallel.cpu_offloading_num_layers"
