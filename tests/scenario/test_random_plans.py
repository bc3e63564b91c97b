"""Any plan that validates must simulate: finite, non-negative parts that add up to the step (hypothesis).

The 10,800-plan sweep benchmark once found interleaved plans that deadlocked the schedule; this keeps drawing
random plans of a dense and an MoE model so such gaps show up in CI, not in a user's sweep.
"""

import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator import load_scenario, simulate
from simulator.errors import UserError

PLANS = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4]), "vpp": st.sampled_from([1, 2]),
    "cp": st.sampled_from([1, 2]), "ulysses": st.sampled_from([1, 2]), "zero": st.sampled_from([0, 1, 2, 3]),
    "sp": st.booleans(), "distributed_optimizer": st.booleans(),
    "recompute": st.sampled_from(["none", "selective", "full"]), "schedule": st.sampled_from(["1f1b", "gpipe"]),
    "overlap_grad_reduce": st.booleans(), "overlap_param_gather": st.booleans(), "tp_comm_overlap": st.booleans(),
})
TRAINING = st.fixed_dictionaries({
    "micro_batch": st.sampled_from([1, 2]), "global_batch": st.sampled_from([16, 32, 64]),
    "seq_len": st.sampled_from([2048, 4096]), "precision": st.sampled_from(["bf16", "amp_bf16", "pure_bf16"]),
    "framework": st.sampled_from(["megatron", "pytorch"]),
})


def _check(scenario: dict) -> None:
    try:
        loaded = load_scenario(scenario)
    except UserError:
        assume(False)
    step = simulate(loaded).step
    parts = [step.compute_s, step.recompute_s, step.bubble_s, step.optimizer_s, step.host_s,
             *step.exposed_comm_s.values()]
    assert all(math.isfinite(p) and p >= -1e-9 for p in parts), parts
    assert math.isclose(sum(parts), step.step_s, rel_tol=1e-6)
    assert step.step_s > 0 and 0 < step.mfu < 1


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(parallel=PLANS, training=TRAINING)
def test_random_dense_plans_simulate(parallel, training):
    _check({"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "llama3-8b"},
            "parallel": parallel, "training": training})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(parallel=PLANS, training=TRAINING, ep=st.sampled_from([2, 4, 8]),
       backend=st.sampled_from(["nccl", "deepep_normal", "deepep_low_latency"]))
def test_random_moe_plans_simulate(parallel, training, ep, backend):
    _check({"system": {"profile": "dgx_h100", "nodes": 2}, "model": {"preset": "mixtral-8x7b", "layers": 8},
            "parallel": {**parallel, "ep": ep}, "training": training, "moe": {"backend": backend}})
