"""DistMM (NSDI'24) against our model (docs/multimodal.md, validation; simulator/validation/distmm.py).

The paper's abstract: 1.32-3.27x over Megatron-LM on CLIP, CoCa and LiT of 1.1B-26B parameters. Its per-model
settings and speedups were not retrievable, so each model runs at the assumed settings of
simulator/validation/data/distmm_nsdi24.yaml (64 A100 40GB, the largest power-of-two batch up to 32768 at which
Megatron's uniform plan fits) and this test pins what the model predicts, in the band or not:

- CLIP ViT-22B + bigG text (22.4B, inside the paper's size range): in the band against both Megatron layouts.
- The 0.4-2.5B presets: 0.89-0.97x, below the band. Three of them (CLIP L/14, CoCa L/14, LiT B/16) are smaller
  than the paper's smallest model (1.1B); CLIP bigG (2.5B) is inside its size range and still below the band.

The numbers are regression pins (rel 1e-3), not tolerances on the paper.
"""

import pytest

from simulator.errors import UserError
from simulator.hardware import load_cluster
from simulator.multimodal.balance import Settings, uniform_plan
from simulator.multimodal.spec import load_multimodal_preset
from simulator.topology import Topology
from simulator.validation.distmm import compare, paper

PAPER = paper()
SETTINGS = PAPER["comparison"]

# model: (parameters in B, batch, uniform s, monolithic s, DistMM s), as the model predicts them
PINNED = {
    "clip-vit-l14": (0.43, 32768, 1.983, 1.983, 2.101),
    "clip-vit-g14": (2.54, 16384, 5.373, 5.373, 5.569),
    "clip-vit-22b": (22.45, 1024, 7.782, 14.974, 4.994),
    "coca-vit-l14": (0.58, 32768, 2.326, 2.326, 3.001),
    "lit-b16-bertl": (0.42, 32768, 0.423, 0.423, 0.439),
}


@pytest.fixture(scope="module")
def results():
    return {m: compare(m, SETTINGS["profile"], SETTINGS["nodes"], SETTINGS["max_batch"]) for m in SETTINGS["models"]}


def test_paper_figures_as_recorded():
    a = PAPER["abstract"]
    assert (a["speedup_min"], a["speedup_max"]) == (1.32, 3.27)
    assert (a["params_min_B"], a["params_max_B"]) == (1.1, 26)
    assert a["baseline"] == "Megatron-LM" and a["per_model_speedups"] is None
    ex = PAPER["overview_example"]
    for sub in ex["submodules"].values():   # every submodule processes the whole batch over its own replicas
        assert sub["dp"] * sub["replica_batch"] == ex["global_batch"]
        assert sub["micro_batch"] * sub["microbatches"] == sub["replica_batch"]
    assert sum(s["dp"] * s["pp"] * s["tp"] for s in ex["submodules"].values()) == ex["nodes"] * ex["gpus_per_node"]


@pytest.mark.parametrize("model", list(PINNED))
def test_predictions_pinned(results, model):
    r = results[model]
    params, batch, uniform, mono, distmm = PINNED[model]
    assert r.gpus == 64 and r.batch == batch
    assert r.params / 1e9 == pytest.approx(params, abs=0.005)
    assert r.uniform.step_s == pytest.approx(uniform, rel=1e-3)
    assert r.monolithic.step_s == pytest.approx(mono, rel=1e-3)
    assert r.distmm.step_s == pytest.approx(distmm, rel=1e-3)


def test_the_22b_model_lands_in_the_band(results):
    lo, hi = PAPER["abstract"]["speedup_min"], PAPER["abstract"]["speedup_max"]
    r = results["clip-vit-22b"]
    assert lo <= r.speedup_vs_uniform <= hi       # 1.56x: the best Megatron layout
    assert lo <= r.speedup_vs_monolithic <= hi    # 3.00x: all layers in one pipeline, split by count
    # where it comes from: Megatron's one micro-batch per replica leaves its pipeline idle (p - 1) / p
    vision = r.uniform.runs["vision"]
    assert vision.choice.pp > 1 and vision.plan.num_microbatches == 1
    assert vision.step.bubble_s > 0.4 * vision.step_s


def test_the_smaller_models_fall_below_the_band(results):
    """Honest miss: where pure data parallelism fits the whole contrastive batch, the uniform plan idles no GPU and
    DistMM can only tie, less what its split granularity costs (one GPU per node: eighths of 64 GPUs)."""
    lo = PAPER["abstract"]["speedup_min"]
    small = [m for m in PINNED if m != "clip-vit-22b"]
    for m in small:
        r = results[m]
        assert r.speedup < lo
        assert all(x.choice.pp == 1 and x.choice.tp == 1 for x in r.uniform.runs.values())
    assert [round(results[m].speedup, 2) for m in small] == [0.94, 0.96, 0.78, 0.96]


def test_ordering_across_models(results):
    """The paper's per-model ordering is not available; ours: the gain needs a model that needs a pipeline."""
    speedup = {m: r.speedup for m, r in results.items()}
    assert max(speedup, key=speedup.get) == "clip-vit-22b"
    assert sorted(speedup, key=speedup.get) == ["coca-vit-l14", "clip-vit-l14", "lit-b16-bertl", "clip-vit-g14",
                                                "clip-vit-22b"]


def test_batch_is_the_largest_the_baseline_fits(results):
    topology = Topology(load_cluster(SETTINGS["profile"], SETTINGS["nodes"]))
    for m in ("clip-vit-g14", "clip-vit-22b"):
        with pytest.raises(UserError, match="no uniform plan fits"):
            uniform_plan(Settings(load_multimodal_preset(m), topology, 2 * results[m].batch))
