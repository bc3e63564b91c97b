"""DistMM (NSDI'24) against our model (docs/multimodal.md, validation; simulator/validation/distmm.py).

The paper's abstract: 1.32-3.27x over Megatron-LM on CLIP, CoCa and LiT of 1.1B-26B parameters. Its per-model
settings and speedups were not retrievable, so each model runs at the assumed settings of
simulator/validation/data/distmm_nsdi24.yaml (64 A100 40GB, the largest power-of-two batch up to 32768 at which
Megatron's uniform plan fits) and this test pins what the model predicts, in the band or not, for 13 presets
from 0.4B to 23B (four or five per family):

- In the band: the models whose largest tower needs a pipeline under Megatron's uniform plan (CLIP ViT-22B 1.56x,
  CoCa ViT-22B 1.39x, LiT with a Llama-2-13B text tower 2.05x).
- Below it: the models data parallelism (with TP inside a node) runs, 0.92-1.22x (docs/multimodal.md says why).

The evaluation section's settings were searched for again (2026-12-01, this file's YAML lists where) and are still
not retrievable: no per-model figure to compare against.

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
    "clip-vit-l14": (0.43, 32768, 1.983, 1.983, 2.040),
    "clip-vit-giant14": (1.22, 32768, 5.739, 5.739, 5.813),
    "clip-vit-g14": (2.54, 16384, 5.373, 5.373, 5.452),
    "clip-eva02-e14": (5.04, 8192, 6.623, 6.623, 5.951),
    "clip-vit-22b": (22.45, 1024, 7.782, 14.974, 4.994),
    "coca-vit-l14": (0.64, 32768, 2.383, 2.383, 2.577),
    "coca-g": (2.21, 16384, 3.655, 3.655, 3.905),
    "coca-vit-e": (5.01, 8192, 6.029, 6.029, 5.904),
    "coca-vit-22b": (22.99, 1024, 7.785, 26.366, 5.615),
    "lit-b16-bertl": (0.42, 32768, 0.423, 0.423, 0.439),
    "lit-l16-t5xl": (1.53, 32768, 1.797, 1.797, 1.833),
    "lit-l16-t5xxl": (5.07, 32768, 3.479, 3.479, 2.863),
    "lit-l16-llama2-13b": (13.16, 16384, 5.953, 7.089, 2.906),
}
#: the models whose speedup over Megatron's better layout falls inside the paper's 1.32-3.27x
IN_BAND = {"clip-vit-22b", "coca-vit-22b", "lit-l16-llama2-13b"}


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


def test_presets_span_the_papers_size_range(results):
    """Each family from below the paper's 1.1B to its top (26B): CLIP 0.4-22.5B, CoCa 0.6-23.2B, LiT 0.4-13.2B."""
    assert set(PINNED) == set(SETTINGS["models"])
    for family in ("clip", "coca", "lit"):
        sizes = [r.params / 1e9 for m, r in results.items() if m.startswith(family)]
        assert min(sizes) < 1.1 and max(sizes) > 13 and len(sizes) >= 4


def test_the_models_that_need_model_parallelism_land_in_the_band(results):
    lo, hi = PAPER["abstract"]["speedup_min"], PAPER["abstract"]["speedup_max"]
    assert {m for m, r in results.items() if lo <= r.speedup <= hi} == IN_BAND
    r = results["clip-vit-22b"]
    assert lo <= r.speedup_vs_uniform <= hi       # 1.56x: the best Megatron layout
    assert lo <= r.speedup_vs_monolithic <= hi    # 3.00x: all layers in one pipeline, split by count
    for m in IN_BAND:   # where it comes from: Megatron's one micro-batch per replica leaves its pipeline idle
        big = max(results[m].uniform.runs.values(), key=lambda x: x.step_s)
        assert big.choice.pp > 1 and big.plan.num_microbatches == 1
        assert big.step.bubble_s > 0.4 * big.step_s


def test_the_data_parallel_models_fall_below_the_band(results):
    """Honest miss: where pure data parallelism (or TP inside a node) fits the whole contrastive batch, the uniform
    plan idles no GPU and DistMM can at best about tie, less its exchange, its fill (the consumer's wait for the
    first micro-batch) and the loss: 0.92-1.02x with uneven splits (the data load balancer's, priced on their real
    split); 1.11x and 1.22x where the colocated uniform plan needs TP 2 to hold both towers and DistMM's apart run at
    TP 1."""
    lo = PAPER["abstract"]["speedup_min"]
    for m, r in results.items():
        if m in IN_BAND:
            continue
        assert r.speedup < lo, m
        assert all(x.choice.pp == 1 for x in r.uniform.runs.values()), m


def test_ordering_across_sizes(results):
    """The paper's per-model ordering is not available; ours: the gain grows with size in each family once the
    uniform plan needs TP or a pipeline; below that it is nearly flat (CoCa L/14 0.92x, CoCa-g 0.94x)."""
    speedup = {m: round(r.speedup, 2) for m, r in results.items()}
    assert [speedup[m] for m in PINNED if m.startswith("lit")] == [0.96, 0.98, 1.22, 2.05]
    assert [speedup[m] for m in PINNED if m.startswith("coca")] == [0.92, 0.94, 1.02, 1.39]
    assert [speedup[m] for m in PINNED if m.startswith("clip")] == [0.97, 0.99, 0.99, 1.11, 1.56]


def test_batch_is_the_largest_the_baseline_fits(results):
    topology = Topology(load_cluster(SETTINGS["profile"], SETTINGS["nodes"]))
    for m in ("clip-vit-g14", "clip-vit-22b"):
        with pytest.raises(UserError, match="no uniform plan fits"):
            uniform_plan(Settings(load_multimodal_preset(m), topology, 2 * results[m].batch))


@pytest.mark.parametrize(("model", "tower", "published_B", "rel"), [
    ("clip-vit-giant14", "vision", 1.01, 0.01),   # ViT-g/14 (Zhai et al. 2022, Table 2): 1011M
    ("clip-eva02-e14", "vision", 4.4, 0.02),      # EVA-02-E (EVA-CLIP, Sun et al. 2023): 4.4B
    ("coca-g", "vision", 1.0, 0.02),              # CoCa Table 1: image encoder 1B (ViT-giant, poolers apart)
    ("coca-vit-e", "vision", 3.9, 0.03),          # ViT-e (PaLI, Chen et al. 2022): 3.9B (no class token, 288 px)
    ("coca-vit-22b", "vision", 21.743, 0.001),    # ViT-22B (Dehghani et al. 2023, Table 1): 21.743B
    ("lit-l16-t5xl", "text", 1.22, 0.02),         # T5 v1.1 XL: 2.85B of which the encoder ~1.2B
    ("lit-l16-llama2-13b", "text", 13.0, 0.02),   # Llama-2-13B (its 32k x 5120 LM head swapped for the projection)
])
def test_preset_towers_match_their_sources(model, tower, published_B, rel):
    spec = load_multimodal_preset(model)
    sub = spec.submodule(tower)
    from simulator.model import param_counts

    # the tower as published: CoCa's attentional pooler (on the coca presets) is not part of the ViT's count
    params = param_counts(sub.engine_model(spec.seq_len(sub)))["total"] + spec.extra_params(sub) - spec.pooler_params(sub)
    assert params / 1e9 == pytest.approx(published_B, rel=rel)


def test_coca_g_decoder_is_near_the_papers_count():
    """CoCa Table 1: image encoder 1B + text decoder 1.1B = 2.1B. Ours: ViT-giant 1.01B + 0.52B unimodal + 0.66B
    multimodal = 2.20B (+5%: the 64k vocabulary's input table and captioning head, 2 x 90M, are counted untied);
    the two attentional poolers (16.2M) come on top, outside Table 1's two columns: 2.21B in all."""
    spec = load_multimodal_preset("coca-g")
    from simulator.validation.distmm import total_params

    assert spec.pooler_params(spec.vision) == pytest.approx(16.24e6, rel=1e-3)
    assert (total_params(spec) - spec.pooler_params(spec.vision)) / 1e9 == pytest.approx(2.1, rel=0.05)


AWS = PAPER["aws_comparison"]
# on 8 AWS p4d.24xlarge: (batch, uniform s, monolithic s, DistMM s)
PINNED_AWS = {
    "clip-vit-l14": (32768, 2.023, 2.023, 2.075),
    "clip-vit-22b": (1024, 8.779, 15.787, 5.163),
    "coca-vit-22b": (1024, 8.800, 27.086, 5.809),
    "lit-l16-llama2-13b": (16384, 6.625, 7.391, 3.031),
}


@pytest.fixture(scope="module")
def aws():
    return {m: compare(m, AWS["profile"], AWS["nodes"], AWS["max_batch"]) for m in AWS["models"]}


@pytest.mark.parametrize("model", list(PINNED_AWS))
def test_on_the_papers_aws_instances(aws, model):
    """A quarter of the DGX's network bandwidth slows the uniform plans' cross-node traffic more than DistMM's (its
    small towers' groups stay inside few nodes): the in-band models gain more (1.56 -> 1.70x, 1.39 -> 1.51x,
    2.05 -> 2.19x); the small CLIP stays below the band (0.97x)."""
    r = aws[model]
    batch, uniform, mono, distmm = PINNED_AWS[model]
    assert r.batch == batch and r.gpus == 64
    assert r.uniform.step_s == pytest.approx(uniform, rel=1e-3)
    assert r.monolithic.step_s == pytest.approx(mono, rel=1e-3)
    assert r.distmm.step_s == pytest.approx(distmm, rel=1e-3)
    lo, hi = PAPER["abstract"]["speedup_min"], PAPER["abstract"]["speedup_max"]
    assert (lo <= r.speedup <= hi) == (model in IN_BAND)
