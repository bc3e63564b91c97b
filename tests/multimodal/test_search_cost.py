"""The DistMM search's shortcuts keep its numbers (docs/multimodal.md, "Cost of the search"): the StepCache shared by
a submodule's plans on one GPU view, the plan / memory / extra GEMMs kept per plan, and the cut of splits whose one
submodule alone is no faster than the best step so far."""

import pytest

import simulator.multimodal.balance as balance
from simulator.hardware import load_cluster
from simulator.memory import estimate_memory
from simulator.multimodal.balance import Settings, distmm_plan, searched_choice
from simulator.multimodal.evaluate import evaluate_submodule, resolve_submodule
from simulator.multimodal.placement import place
from simulator.multimodal.spec import load_multimodal_preset
from simulator.schedule.cache import StepCache
from simulator.topology import Topology


@pytest.fixture(scope="module")
def two():
    return Topology(load_cluster("dgx_a100_40gb", 2))


def _numbers(run):
    s = run.step
    return (run.step_s, s.compute_s, s.recompute_s, s.bubble_s, s.optimizer_s, dict(s.exposed_comm_s),
            s.stage_end_s, s.stage_busy_s, run.cross_attention_s, run.pooler_s, run.stage_peaks,
            run.device_peak_bytes, run.oom)


@pytest.mark.parametrize("preset", ["clip-vit-l14", "coca-vit-l14"])
def test_a_shared_step_cache_gives_each_plan_its_own_numbers(two, preset):
    """Plans of one submodule on one GPU set (12 GPUs packed after 4: 4 + 8 over the nodes) priced in a row with one
    StepCache, each equal to the same plan priced alone (its own cache, its memory estimated afresh), bit for bit."""
    spec = load_multimodal_preset(preset)
    sub = spec.submodules[-1]
    gpus = place({"a": 4, "b": 12}, 8, 2, "packed")["b"]
    choices = [searched_choice(tp, pp, 12 // (tp * pp), mb, rc)
               for tp, pp in ((1, 1), (2, 2), (1, 4)) for mb in (64, 16) for rc in ("none", "full")]
    cache = StepCache()
    for choice in choices:
        shared = evaluate_submodule(spec, sub, choice, gpus, two, 1024, cache=cache)
        alone = evaluate_submodule(spec, sub, choice, gpus, two, 1024)
        assert _numbers(shared) == _numbers(alone), choice
        fresh = estimate_memory(resolve_submodule(spec, sub, choice, 1024, "bf16", "adam"),
                                hbm_capacity_bytes=two.cluster.node.gpu.memory.capacity)
        assert shared.memory == fresh


def test_the_cut_keeps_the_plan_and_skips_searches(two, monkeypatch):
    """distmm_plan with the cut (a split stops once one submodule's best step is no faster than the best step so
    far) and without it: the same step, placement and plans; the cut searches fewer submodule shapes."""
    s = Settings(load_multimodal_preset("clip-vit-l14"), two, 1024)
    calls = []
    search = balance.best_submodule_plan
    monkeypatch.setattr(balance, "best_submodule_plan", lambda *a: calls.append(a[2]) or search(*a))
    cut = distmm_plan(s)
    with_cut = len(calls)
    evaluate = balance._evaluate_split
    monkeypatch.setattr(balance, "_evaluate_split", lambda *a: evaluate(*a[:5]))   # beat = inf: no cut
    calls.clear()
    full = distmm_plan(s)
    assert cut.step_s == full.step_s and cut.placement == full.placement
    assert {k: (r.choice, r.gpus) for k, r in cut.runs.items()} == {k: (r.choice, r.gpus) for k, r in full.runs.items()}
    assert with_cut < len(calls)
