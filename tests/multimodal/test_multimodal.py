"""Multimodal training (docs/multimodal.md): the contrastive loss by hand, per-submodule memory, the pipeline's
batch limit (M - Ms/P) / Ma, bad submodule plans, and the composition rules."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cli import main
from simulator.errors import UserError
from simulator.hardware import load_cluster
from simulator.memory import estimate_memory
from simulator.model import param_counts
from simulator.multimodal.evaluate import PlanChoice, evaluate_submodule, extra_state_bytes, replica_batch
from simulator.multimodal.loss import ContrastiveCost, max_contrastive_microbatch
from simulator.multimodal.placement import place
from simulator.multimodal.scenario import load_multimodal
from simulator.multimodal.spec import load_multimodal_preset
from simulator.topology import Topology
from simulator.units import GIBI

ROOT = Path(__file__).resolve().parents[2]


def test_contrastive_all_gather_bytes_and_logits_flops_by_hand():
    # CLIP ViT-L/14: B = 32768 pairs, e = 768, bf16, 256 loss ranks -> b = 128 per rank
    c = ContrastiveCost(batch=32768, embed_dim=768, ranks=256, dtype_bytes=2)
    assert c.all_gather_bytes == 32768 * 768 * 2 == 50_331_648          # 48 MiB per modality
    assert c.local_rows == 128
    # image->text and text->image: 2 matmuls of (128 x 768) @ (768 x 32768), 2 FLOPs per multiply-add
    assert c.logits_forward_flops_per_rank == 2 * 2 * 128 * 768 * 32768 == 12_884_901_888
    # forward + backward (2x) over all ranks: 12 B^2 e
    assert c.logits_flops_total == 12 * 32768 ** 2 * 768
    assert c.logits_bytes_per_rank == 2 * 128 * 32768 * 4


def test_batch_limit_formula_by_hand():
    # M = 80 GiB, Ms = 96 GiB of states over P = 4 stages -> 24 GiB; Ma = 0.5 GiB per sample: (80 - 24) / 0.5 = 112
    assert max_contrastive_microbatch(80 * GIBI, 96 * GIBI, 4, 0.5 * GIBI) == pytest.approx(112)
    assert max_contrastive_microbatch(80 * GIBI, 400 * GIBI, 4, GIBI) == 0.0   # the states alone do not fit


@given(st.floats(1e9, 1e11), st.floats(0, 1e12), st.integers(1, 64), st.floats(1e6, 1e10))
def test_batch_limit_grows_with_stages_and_shrinks_with_activations(m, ms, p, ma):
    base = max_contrastive_microbatch(m, ms, p, ma)
    assert max_contrastive_microbatch(m, ms, p * 2, ma) >= base
    assert max_contrastive_microbatch(m, ms, p, ma * 2) <= base


@pytest.fixture(scope="module")
def a100():
    return Topology(load_cluster("dgx_a100_40gb", 2))


def test_batch_limit_matches_the_engine_memory(a100):
    """The engine keeps the whole replica batch in flight before the loss (batch-sync): the largest batch that
    fits is (M - Ms/P) / Ma with Ms/P and Ma read off its own memory items."""
    spec = load_multimodal_preset("clip-vit-l14")
    vision = spec.vision
    runs = {b: evaluate_submodule(spec, vision, PlanChoice(1, 2, 1, 8), (0, 1), a100, b) for b in (64, 128)}
    st64, st128 = (runs[b].memory.stages[0] for b in (64, 128))
    per_sample = (st128.bucket("activations") - st64.bucket("activations")) / 64
    static = sum(st64.bucket(k) for k in ("weights", "gradients", "main_params", "optimizer"))
    # activations are linear in the in-flight samples: 128 samples hold exactly twice 64's
    assert st128.bucket("activations") == pytest.approx(2 * st64.bucket("activations"))
    m = a100.cluster.node.gpu.memory.capacity
    limit = max_contrastive_microbatch(m, static * 2, 2, per_sample)
    assert limit == pytest.approx((m - static) / per_sample)
    assert 128 < limit < 2048   # ViT-L/14 stage of 12 layers without recompute: a few hundred samples per GPU


def test_vit_tokens_and_parameters():
    spec = load_multimodal_preset("clip-vit-l14")
    v, t = spec.submodules
    assert v.patches == (224 // 14) ** 2 == 256 and spec.seq_len(v) == 257 and spec.seq_len(t) == 77
    # ViT-L/14 304M (Dosovitskiy et al. 2021, Table 1: ViT-L 307M with a 1000-class head); CLIP text 123M
    assert param_counts(v.engine_model(257))["total"] + spec.extra_params(v) == pytest.approx(303.97e6, rel=1e-3)
    assert param_counts(t.engine_model(77))["total"] + spec.extra_params(t) == pytest.approx(123.65e6, rel=1e-3)
    llava = load_multimodal_preset("llava-1.5-7b")
    assert llava.seq_len(llava.submodule("llm")) == 1472 + 576


def test_per_submodule_memory_by_hand(a100):
    """Each submodule holds only its own states: bf16 weights (2 B) + fp32 grads (4) + main params (4) + two
    Adam moments (8) = 18 B per parameter per GPU at tp = pp = 1 (docs/memory.md), plus its own activations."""
    spec = load_multimodal_preset("clip-vit-l14")
    runs = {s.name: evaluate_submodule(spec, s, PlanChoice(1, 1, 8, 8), tuple(range(8 * i, 8 * i + 8)), a100, 512)
            for i, s in enumerate(spec.submodules)}
    for name, run in runs.items():
        stage = run.memory.stages[0]
        states = sum(stage.bucket(k) for k in ("weights", "gradients", "main_params", "optimizer"))
        engine_params = param_counts(run.plan.model)["total"]
        assert states == pytest.approx(18 * engine_params, rel=1e-6), name
        assert run.extra_bytes == pytest.approx(18 * spec.extra_params(run.sub))
        assert run.stage_peaks[0] == pytest.approx(stage.peak + run.extra_bytes)
    assert extra_state_bytes(runs["text"].plan, 1e6) == pytest.approx(18e6)
    # the vision tower's 304M parameters at 18 B: 5.1 GiB of states on its GPUs, none of it on the text GPUs
    assert 18 * 303.97e6 / GIBI == pytest.approx(5.096, rel=1e-3)
    assert runs["vision"].device_peak_bytes > runs["text"].device_peak_bytes


def test_padding_when_dp_does_not_divide_the_batch():
    assert replica_batch(4096, 16, 8) == 256
    assert replica_batch(4096, 14, 16) == 304      # ceil(4096 / 14) = 293, rounded up to 19 micro-batches of 16


def test_placements_keep_groups_even():
    sep = place({"vision": 8, "text": 8}, 8, 2, "separate_nodes")
    assert sep == {"vision": tuple(range(8)), "text": tuple(range(8, 16))}
    same = place({"vision": 12, "text": 4}, 8, 2, "same_node")
    assert same["vision"] == (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13) and same["text"] == (6, 7, 14, 15)
    with pytest.raises(UserError, match="multiple of the node count"):
        place({"vision": 11, "text": 5}, 8, 2, "same_node")


def _write(tmp_path, plans: str, extra: str = "") -> Path:
    path = tmp_path / "mm.yaml"
    path.write_text("system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n  model: {preset: clip-vit-l14}\n"
                    f"  global_batch: 1024\n  compare: false\n{extra}  plans:\n{plans}")
    return path


def test_bad_plans_exit_2_naming_the_submodule_and_rule(tmp_path, capsys):
    cases = {
        "    vision: {gpus: 12}\n    text: {gpus: 8}\n": ("multimodal.plans", "add up", "vision (12) + text (8) = 20 != 16"),
        "    vision: {gpus: 16}\n": ("multimodal.plans", "'text' has no plan", "every submodule needs one"),
        "    vision: {gpus: 8}\n    text: {gpus: 8}\n    audio: {gpus: 2}\n": ("multimodal.plans.audio", "unknown submodule", "audio"),
        "    vision: {gpus: 8, tp: 3}\n    text: {gpus: 8}\n": ("multimodal.plans.vision", "'vision'", "multiple of tp (3)"),
        "    vision: {gpus: 8, tp: 2, dp: 2}\n    text: {gpus: 8}\n": ("multimodal.plans.vision.dp", "'vision'", "!= gpus (8)"),
        "    vision: {gpus: 8, tpp: 2}\n    text: {gpus: 8}\n": ("multimodal.plans.vision.tpp", "", ""),
    }
    for plans, (key, *words) in cases.items():
        path = _write(tmp_path, plans)
        assert main(["run", str(path)]) == 2, plans
        err = capsys.readouterr().err
        assert key in err and all(w in err for w in words), err
        assert "Traceback" not in err


def test_explicit_plan_runs_from_the_cli_with_json(tmp_path, capsys):
    import json

    path = _write(tmp_path, "    vision: {gpus: 12, micro_batch: 16, recompute: full}\n"
                            "    text: {gpus: 4, micro_batch: 32}\n", "  placement: same_node\n")
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    subs = data["submodules"]
    assert set(subs) == {"vision", "text"} and subs["vision"]["gpus"] == 12 and subs["text"]["dp"] == 4
    assert data["step"]["placement"] == "same_node" and data["step"]["exchange_link"] == "nvlink"
    step = data["step"]
    # DistMM composition: the slowest submodule + exchange + fill + loss
    assert step["step_s"] == pytest.approx(max(s["time"]["step_s"] for s in subs.values()) + step["exchange_s"]
                                           + step["fill_s"] + step["loss_s"])
    assert data["time"]["step_s"] == step["step_s"] and data["memory"]["device_peak_bytes"] == max(
        subs["vision"]["memory"]["device_peak_bytes"], subs["text"]["memory"]["device_peak_bytes"] + step["loss_bytes"])
    # the contrastive logits a loss rank keeps: text on 4 GPUs (dp 4), b = 1024 / 4, two b x B fp32 matrices
    assert step["loss_bytes"] == 2 * 256 * 1024 * 4
    assert main(["run", str(path)]) == 0
    assert "memory per GPU" in capsys.readouterr().out


def test_uniform_is_the_sum_and_colocated_memory_adds(tmp_path):
    from simulator.multimodal.scenario import simulate_multimodal

    path = tmp_path / "u.yaml"
    path.write_text("system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n  model: {preset: clip-vit-l14}\n"
                    "  global_batch: 1024\n  strategy: uniform\n  compare: false\n"
                    "  uniform: {tp: 1, pp: 1, micro_batch: 16, recompute: full}\n")
    result = simulate_multimodal(load_multimodal(path))
    step = result.step
    runs = list(step.runs.values())
    assert step.step_s == pytest.approx(sum(r.step_s for r in runs) + step.loss_s)
    assert step.device_peak_bytes == pytest.approx(sum(r.stage_peaks[0] for r in runs) + runs[0].memory.runtime_bytes
                                                   + 2 * (1024 / 16) * 1024 * 4)


def test_shipped_scenarios_load():
    for path in sorted((ROOT / "scenarios" / "multimodal").glob("*.yaml")):
        assert path.read_text().startswith("#")
        load_multimodal(path)


def test_engine_memory_is_unchanged_for_a_plain_plan(a100):
    """The multimodal layer composes the engine: a submodule's memory report is estimate_memory's, untouched."""
    spec = load_multimodal_preset("clip-vit-l14")
    run = evaluate_submodule(spec, spec.vision, PlanChoice(1, 1, 8, 8), tuple(range(8)), a100, 256)
    assert run.memory.peak_bytes == estimate_memory(run.plan, a100.cluster.node.gpu.memory.capacity).peak_bytes


def test_monolithic_split_is_megatrons_by_layer_count():
    from simulator.multimodal.monolithic import split_layers

    # CLIP ViT-L/14: 24 vision + 12 text layers over 4 stages, 9 each
    assert split_layers([("vision", 24), ("text", 12)], 4) == [{"vision": 9}, {"vision": 9},
                                                               {"vision": 6, "text": 3}, {"text": 9}]
    # 80 layers (bigG) over 3 stages: 27, 27, 26
    assert [sum(s.values()) for s in split_layers([("vision", 48), ("text", 32)], 3)] == [27, 27, 26]


def test_monolithic_with_one_stage_is_the_sequential_uniform_plan(a100):
    """With pp = 1 the monolithic pipeline and the uniform plan run the same ops on the same GPUs: equal steps."""
    from simulator.multimodal.balance import Settings
    from simulator.multimodal.compose import uniform_step
    from simulator.multimodal.monolithic import monolithic_step

    spec = load_multimodal_preset("clip-vit-l14")
    s = Settings(spec, a100, 1024)
    choice = PlanChoice(1, 1, 16, 16, "full")
    mono = monolithic_step(s, choice)
    gpus = tuple(range(16))
    runs = {sub.name: evaluate_submodule(spec, sub, choice, gpus, a100, 1024) for sub in spec.submodules}
    assert mono.step_s == pytest.approx(uniform_step(spec, a100, runs, 1024).step_s, rel=1e-9)
    assert mono.stage_imbalance == 1.0


def test_monolithic_pipeline_is_paced_by_its_vision_stages(a100):
    """Equal layer counts, unequal layers: at pp = 4 the text-only stage idles while the vision stages set the pace."""
    from simulator.multimodal.balance import Settings
    from simulator.multimodal.monolithic import monolithic_step

    s = Settings(load_multimodal_preset("clip-vit-l14"), a100, 1024)
    mono = monolithic_step(s, PlanChoice(1, 4, 4, 16, "full"))
    busy = mono.stage_busy_s
    assert busy[0] == pytest.approx(busy[1]) and busy[3] < busy[2] < busy[0]
    assert mono.stage_imbalance > 1.3


def test_schema_has_the_multimodal_section(capsys):
    import json

    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    section = schema["properties"]["multimodal"]
    assert section["additionalProperties"] is False and {"plans", "global_batch", "strategy"} <= set(
        section["properties"])
    assert "SubmodulePlan" in schema["$defs"] and schema["$defs"]["SubmodulePlan"]["additionalProperties"] is False


def test_trace_has_every_submodule_stage_and_the_loss(tmp_path, capsys):
    import json

    path = _write(tmp_path, "    vision: {gpus: 12, pp: 2, micro_batch: 16, recompute: full}\n"
                            "    text: {gpus: 4, micro_batch: 32}\n", "  placement: same_node\n")
    trace = tmp_path / "t.json"
    assert main(["run", str(path), "--trace", str(trace)]) == 0
    data = json.loads(trace.read_text())
    names = {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"vision pipeline stage 0", "vision pipeline stage 1", "text pipeline stage 0", "exchange and loss"} <= names
    loss = [e for e in data["traceEvents"] if e["ph"] == "X" and e["name"] == "contrastive loss"]
    assert len(loss) == 1 and loss[0]["ts"] + loss[0]["dur"] == pytest.approx(data["otherData"]["step_s"] * 1e6)


def test_bad_multimodal_sections_exit_2_located(tmp_path, capsys):
    base = "system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n"
    cases = {
        "  model: {preset: clip-vit-xx}\n  global_batch: 64\n": ("multimodal.model.preset", "accepted: clip-eva02-e14, clip-vit-22b"),
        "  model: {preset: clip-vit-l14}\n": ("multimodal.global_batch", "required"),
        "  model: {preset: clip-vit-l14}\n  global_batch: 64\n  stratgy: distmm\n": ("multimodal.stratgy", ""),
        "  model: {preset: clip-vit-l14, layers: 3}\n  global_batch: 64\n": ("multimodal.model", "not both"),
        ("  model:\n    loss: contrastive\n    embed_dim: 8\n    submodules:\n"
         "      vision: {role: vision, layers: 2, hidden: 8, heads: 2, image_size: 30, patch_size: 14, embed_dim: 8}\n"
         "      text: {role: text, layers: 2, hidden: 8, heads: 2, tokens: 4, vocab: 10, embed_dim: 8}\n"
         "  global_batch: 64\n"): ("multimodal.model.submodules.vision.patch_size", "not a multiple of patch_size"),
        ("  model:\n    loss: contrastive\n    submodules:\n"
         "      llm: {role: llm, layers: 2, hidden: 8, heads: 2, tokens: 4, vocab: 10, embed_dim: 10}\n"
         "  global_batch: 64\n"): ("multimodal.model.loss", "one vision and one text"),
    }
    for body, (key, words) in cases.items():
        path = tmp_path / "bad.yaml"
        path.write_text(base + body)
        assert main(["run", str(path)]) == 2, body
        err = capsys.readouterr().err
        assert key in err and words in err and str(path) in err, err


@given(st.sampled_from([2, 4, 6, 8, 10, 12, 14]), st.sampled_from(["separate_nodes", "same_node"]))
def test_distmm_step_is_at_least_its_slowest_submodule(vision_gpus, how):
    from simulator.multimodal.compose import distmm_step

    topology = Topology(load_cluster("dgx_a100_40gb", 2))
    spec = load_multimodal_preset("clip-vit-l14")
    counts = {"vision": vision_gpus, "text": 16 - vision_gpus}
    try:
        ranks = place(counts, 8, 2, how)
        runs = {s.name: evaluate_submodule(spec, s, PlanChoice(1, 1, counts[s.name], 8, "full"), ranks[s.name],
                                           topology, 256) for s in spec.submodules}
    except UserError:   # same_node with a count the node count does not divide (uneven groups are priced)
        return
    step = distmm_step(spec, topology, runs, 256, how)
    assert step.step_s >= max(r.step_s for r in runs.values()) and step.loss_s > 0
    assert step.exchange_link == ("nvlink" if how == "same_node" else step.exchange_link)
    assert step.device_peak_bytes == max(runs["vision"].device_peak_bytes, runs["text"].device_peak_bytes
                                         + step.loss_bytes)


def test_micro_batches_split_the_replica_evenly():
    """ceil(R / m) for m = ceil(R / 256), then doubling (docs/multimodal.md): 8192 over 14 replicas is R = 586,
    m = 3, 6, 12, 24 -> 196, 98, 49, 25; a 16-stage pipeline goes on while m <= 4 x 16: m = 48 -> 13."""
    from simulator.multimodal.balance import micro_batch_candidates

    assert micro_batch_candidates(8192, 14) == [196, 98, 49, 25]
    assert micro_batch_candidates(8192, 14, 16) == [196, 98, 49, 25, 13]
    assert micro_batch_candidates(8, 4) == [2, 1]      # R = 2: m = 1, 2 (never more micro-batches than samples)


def test_megatron_baseline_runs_a_contrastive_batch_as_one_micro_batch():
    """Megatron-LM computes the loss per micro-batch: a contrastive batch of B over dp replicas is one micro-batch
    of ceil(B / dp) (8192 / 16 = 512); an LM loss may use any micro-batch."""
    from simulator.multimodal.balance import baseline_micro_batches, micro_batch_candidates

    assert baseline_micro_batches(load_multimodal_preset("clip-vit-l14"), 8192, 16) == [512]
    assert baseline_micro_batches(load_multimodal_preset("llava-1.5-7b"), 192, 6) == micro_batch_candidates(192, 6)


def test_one_micro_batch_pipeline_idles_p_minus_one_stages(a100):
    """GPipe with one micro-batch over p stages: each stage works F + B once and waits for the other p - 1, so the
    bubble is (p - 1) x a stage's work (p = 4: 3x, plus the boundary transfers); four micro-batches cut it to
    (p - 1) / m of the work per micro-batch."""
    spec = load_multimodal_preset("clip-vit-l14")
    vision = spec.submodule("vision")
    one = evaluate_submodule(spec, vision, PlanChoice(1, 4, 4, 256, "full"), tuple(range(16)), a100, 1024)
    assert one.plan.num_microbatches == 1
    work = one.step.compute_s + one.step.recompute_s
    assert one.step.bubble_s / work == pytest.approx(3.0, rel=0.03)
    four = evaluate_submodule(spec, vision, PlanChoice(1, 4, 4, 64, "full"), tuple(range(16)), a100, 1024)
    assert four.step.bubble_s < one.step.bubble_s / 3


@given(st.integers(1, 70000), st.integers(1, 512), st.sampled_from([1, 2, 4, 8, 16]))
def test_micro_batch_candidates_cover_the_replica(batch, dp, pp):
    """Every candidate splits the replica R = ceil(B / dp) into m = ceil(R / mb) micro-batches padding fewer than m
    samples; the first is the fewest micro-batches of at most 256; they shrink strictly."""
    from simulator.multimodal.balance import MAX_MICRO_BATCH, micro_batch_candidates

    replica = -(-batch // dp)
    tries = micro_batch_candidates(batch, dp, pp)
    assert tries and tries[0] == -(-replica // -(-replica // MAX_MICRO_BATCH)) and tries[0] <= MAX_MICRO_BATCH
    assert all(a > b for a, b in zip(tries, tries[1:], strict=False))
    for mb in tries:
        m = -(-replica // mb)
        assert 0 <= replica_batch(batch, dp, mb) - replica < m
