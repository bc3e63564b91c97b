"""Hypothesis properties of the step-time engine: a slower network never makes the step faster; more
micro-batches lower the 1F1B bubble fraction; the breakdown always adds up to the step time."""

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware import load_cluster
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.schedule import run_timeline, simulate_step, stage_orders
from simulator.topology import Topology

MODEL = load_model_preset("llama3-8b")


@cache
def topology(nic_scale: float) -> Topology:
    cluster = load_cluster("dgx_h100", nodes=4)
    nics = cluster.node.nics.model_copy(update={"bandwidth": cluster.node.nics.bandwidth * nic_scale})
    return Topology(cluster.model_copy(update={"node": cluster.node.model_copy(update={"nics": nics})}))


PLANS = st.sampled_from([dict(tp=8, pp=2), dict(tp=4, zero=1), dict(tp=2, pp=2, sp=True), dict(tp=8, zero=3),
                         dict(tp=1, cp=4, sp=False), dict(tp=2, pp=4, vpp=2)])


@settings(max_examples=25, deadline=None)
@given(plan=PLANS, slow=st.sampled_from([0.25, 0.5, 0.9]))
def test_slower_network_never_lowers_step_time(plan, slow):
    rp = resolve_plan(MODEL, plan, dict(seq_len=4096, micro_batch=1, global_batch=64), 32)
    fast = simulate_step(MODEL, rp, topology(1.0))
    slower = simulate_step(MODEL, rp, topology(slow))
    assert slower.step_s >= fast.step_s * (1 - 1e-12)
    d = slower.to_dict()["time"]
    parts = sum(v for k, v in d["breakdown_s"].items() if k != "exposed_comm")
    assert abs(parts + sum(d["breakdown_s"]["exposed_comm"].values()) - d["step_s"]) < 1e-9 * d["step_s"]


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(2, 8), m=st.integers(1, 32), extra=st.integers(1, 32), f=st.floats(0.1, 2.0),
       ratio=st.floats(1.0, 3.0))
def test_more_microbatches_lower_the_1f1b_bubble_fraction(pp, m, extra, f, ratio):
    def bubble_fraction(mb):
        tl = run_timeline(stage_orders("1f1b", pp, 1, mb), [[f]] * pp, [[f * ratio]] * pp, 0.0)
        return 1 - tl[0].busy_s / tl[0].end_s
    assert bubble_fraction(m + extra) <= bubble_fraction(m) + 1e-12
