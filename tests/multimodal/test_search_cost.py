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


def _reference_fits(s, subs, tp, pp, dp, recompute):
    """fitting_micro_batches as it was: every try's own reports."""
    tries = balance.micro_batch_candidates(s.batch, dp, pp)
    for i, mb in enumerate(tries):
        peaks = [balance.stage_peaks(s, sub, searched_choice(tp, pp, dp, mb, recompute)) for sub in subs]
        if all(p is not None for p in peaks) and \
                max(sum(col) for col in zip(*peaks, strict=True)) <= balance._capacity(s):
            return tries[i:]
    return []


@pytest.mark.parametrize(("preset", "batch", "mixed"), [("clip-vit-l14", 8192, 0), ("coca-vit-l14", 4096, 0),
                                                        ("llava-1.5-7b", 256, 10)])
def test_coefficient_peaks_match_the_reports_and_keep_the_verdicts(two, preset, batch, mixed):
    """The later micro-batches of a layout take the engine's peaks from the first one's coefficients: each stage
    within 1e-9 of the plan's own report (extras included), and every layout's fitting micro-batches as with a
    report per try: contrastive batches in flight whole (a layout fits at every micro-batch or none) and LLaVA's LM
    loss under 1F1B (smaller micro-batches hold less: layouts that fit only from some micro-batch on)."""
    s = Settings(load_multimodal_preset(preset), two, batch)
    compared = verdicts = some = 0
    for sub in s.spec.submodules:
        for tp, pp, dp in balance.candidate_layouts(s, [sub], 16):
            for recompute in ("none", "full"):
                tries = balance.micro_batch_candidates(batch, dp, pp)
                first = searched_choice(tp, pp, dp, tries[0], recompute)
                if balance.stage_peaks(s, sub, first) is None:
                    continue
                line = balance._line(s.spec, sub, first, batch, "bf16", "adam")
                for mb in tries[1:]:
                    choice = searched_choice(tp, pp, dp, mb, recompute)
                    exact = balance.stage_peaks(s, sub, choice)
                    by_line = balance._line_peaks(s.spec, sub, choice, batch, "bf16", "adam", line)
                    assert by_line == pytest.approx(exact, rel=1e-9)
                    compared += 1
                got = balance.fitting_micro_batches(s, [sub], tp, pp, dp, recompute)
                assert got == _reference_fits(s, [sub], tp, pp, dp, recompute)
                verdicts += len(tries) - len(got)
                some += 0 < len(got) < len(tries)
    assert compared >= 20 and verdicts >= 10    # overflowing tries decided by the coefficients
    assert some >= mixed
