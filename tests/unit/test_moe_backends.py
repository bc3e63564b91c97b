"""MoE backends as registered objects of the resolved plan (simulator/implementation/moe_backends.py): the registry's facts,
how a scenario's backend reaches the plan, and that the plan's backend is the one priced."""

from functools import cache

import pytest

from simulator.errors import UserError
from simulator.hardware import load_cluster
from simulator.model import load_model_preset
from simulator.moe import MoeSettings
from simulator.moe.backends import KERNELS
from simulator.plan import MOE_BACKENDS, SERVING_BACKENDS, moe_backend, resolve_plan, serving_backend
from simulator.scenario.load import load_scenario
from simulator.schedule import simulate_step
from simulator.topology import Topology

TRAIN = dict(seq_len=4096, micro_batch=1, global_batch=64)


def test_every_backend_is_priced_and_sourced():
    for backend in (*MOE_BACKENDS.values(), *SERVING_BACKENDS.values()):
        assert len(backend.source) > 40, backend.name
        assert backend.transport_problem(backend.default_transport) is None, backend.name
        phases = {backend.for_phase(p) for p in ("prefill", "decode")}
        for run in phases:   # what a step runs is priced: by a kernel family or as collectives, never both
            assert (run.kernel in KERNELS) != run.collective, run.name
            assert not run.collective or run.comm_name not in MOE_BACKENDS
            assert run.collective or MOE_BACKENDS[run.comm_name].kernel == run.kernel
    assert moe_backend("cpu_proxy").proxy_threads and not moe_backend("deepep_low_latency").proxy_threads
    assert [b.name for b in MOE_BACKENDS.values() if b.deepep_buffers] == ["deepep_normal", "deepep_low_latency"]
    assert [b.name for b in MOE_BACKENDS.values() if b.sorted_by_expert] == ["nccl"]


def test_serving_phases():
    auto = serving_backend("auto")
    assert (auto.for_phase("prefill").name, auto.for_phase("decode").name) == \
        ("deepep_high_throughput", "deepep_low_latency")
    assert not auto.for_phase("prefill").graph_capturable and auto.for_phase("decode").graph_capturable
    assert serving_backend("pplx").comm_name == "deepep_low_latency"
    assert serving_backend("naive").for_phase("prefill").collective


def test_unknown_names_say_what_is_accepted():
    with pytest.raises(UserError, match="moe.backend: unknown MoE backend 'deepep'.*nccl, deepep_normal"):
        moe_backend("deepep")
    with pytest.raises(UserError, match="serving.all2all_backend: unknown"):
        serving_backend("nccl")


def test_scenarios_put_their_backend_in_the_plan(tmp_path):
    base = "scenarios/mixtral_8x7b_ep.yaml"
    for name in MOE_BACKENDS:
        transport = {"transport": "ibgda"} if name == "deepep_low_latency" else {}
        plan = load_scenario(base, {"moe": {"backend": name, **transport}}).plan
        assert plan.moe_backend is MOE_BACKENDS[name]
    serving = load_scenario("scenarios/serve_deepseek_v3_h200_wide_ep.yaml", {"serving": {"all2all_backend": "pplx"}})
    assert serving.plan.moe_backend is SERVING_BACKENDS["pplx"]


@cache
def _setup():
    model = load_model_preset("gpt-oss-120b")
    return model, resolve_plan(model, dict(tp=1, ep=32), TRAIN, 32), Topology(load_cluster("dgx_h100", nodes=4))


@pytest.mark.parametrize("name", ["deepep_normal", "cpu_proxy"])
def test_the_plans_backend_is_priced(name):
    """A plan resolved with a backend times as the same plan given that backend through ``moe:`` settings, and
    differs from the NCCL default's time."""
    model, plan, topology = _setup()
    given = resolve_plan(model, dict(tp=1, ep=32), TRAIN, 32, moe_backend=name)
    assert given.moe_backend.name == name and plan.moe_backend.name == "nccl"
    by_plan = simulate_step(model, given, topology)
    by_settings = simulate_step(model, plan, topology, moe=MoeSettings(backend=name))
    assert by_plan.step_s == by_settings.step_s
    assert by_plan.moe["backend"] == name
    assert by_plan.step_s != simulate_step(model, plan, topology).step_s
