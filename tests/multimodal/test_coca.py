"""CoCa as CoCa is built (Yu et al. 2022, section 3.2): an image encoder, a unimodal text decoder and a multimodal
text decoder with cross-attention to the image tokens; contrastive + captioning losses (docs/multimodal.md).
Numbers by hand: the cross-attention FLOPs per layer, its parameters, and the bytes each exchange sends."""

import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.hardware import load_cluster
from simulator.model import param_counts
from simulator.multimodal.compose import edge_s, edge_transfer
from simulator.multimodal.evaluate import PlanChoice, cross_attention_gemms, evaluate_submodule
from simulator.multimodal.placement import place
from simulator.multimodal.spec import TokenEdge, load_multimodal_preset
from simulator.topology import Topology

COCA = load_multimodal_preset("coca-vit-l14")


def test_coca_is_three_submodules_with_both_losses():
    assert [s.name for s in COCA.submodules] == ["vision", "text", "decoder"]
    vision, text, decoder = COCA.submodules
    assert COCA.loss == "contrastive+captioning" and COCA.contrastive_text is text
    assert text.causal and text.cross_attention_layers == 0 and text.embed_dim == COCA.embed_dim == 768
    # the multimodal half: 12 layers, every one with cross-attention, reading the unimodal half's token states,
    # ending in the captioning head over the 49,408-token vocabulary
    assert decoder.cross_attention_layers == decoder.layers == 12 and decoder.input_from == "text"
    assert decoder.embed_dim == 49408 and decoder.input_rows == 0
    assert text.layers + decoder.layers == 24   # OpenCLIP coca_ViT-L-14: text_cfg 12 + multimodal_cfg 12 layers


def test_cross_attention_flops_per_layer_by_hand():
    # one sample, T = 76 text tokens (h = 768, 12 heads) attending to N = 257 image tokens of width h_v = 1024
    T, N, h, hv = 76, 257, 768, 1024
    m, k, n, batch = cross_attention_gemms(1, T, N, h, hv, 12)
    flops = 2 * (m * k * n * batch)
    assert flops[:2].sum() == 4 * T * h * h == 179_306_496           # Q and O projections
    assert flops[2:4].sum() == 4 * N * hv * h == 808_452_096         # K and V projections of the image tokens
    assert flops[4:].sum() == 2 * 2 * T * N * h == 60_002_304        # Q K^T and P V
    assert flops.sum() == 1_047_760_896
    # TP 2 splits every GEMM's heads or output columns: half on each rank; a micro-batch of 8 is 8x
    m2, k2, n2, b2 = cross_attention_gemms(8, T, N, h, hv, 12, tp=2)
    assert 2 * (m2 * k2 * n2 * b2).sum() == 8 * 1_047_760_896 / 2


def test_decoder_parameters_by_hand():
    decoder = COCA.submodule("decoder")
    # cross-attention per block: Q, O (768 x 768), K, V (1024 x 768: from the image tokens' width), a norm (2 x 768)
    cross = 12 * (2 * 768 * 768 + 2 * 1024 * 768 + 2 * 768)
    assert cross == 33_048_576
    # no input table of its own (the engine's 49,408 x 768 stand-in comes off), the captioning head stays
    assert COCA.extra_params(decoder) == cross - 49408 * 768
    # 12 layers of 12 h^2 + 13 h, the head 49,408 x 768, 76 positions, the final norm, the cross-attention
    total = 12 * (12 * 768**2 + 13 * 768) + 49408 * 768 + 76 * 768 + 2 * 768 + cross
    assert param_counts(decoder.engine_model(76))["total"] + COCA.extra_params(decoder) == total == 156_108_288


def test_token_edges():
    edges = {(e.producer, e.consumer): e for e in COCA.token_edges()}
    assert edges == {
        ("vision", "decoder"): TokenEdge("vision", "decoder", 257 * 1024, "image_tokens", cross_attention=True),
        ("text", "decoder"): TokenEdge("text", "decoder", 76 * 768, "text_tokens"),
        ("vision", "text"): TokenEdge("vision", "text", 768, "embedding"),
    }
    assert COCA.feeds(COCA.submodule("vision")) and COCA.feeds(COCA.submodule("text"))
    assert not COCA.feeds(COCA.submodule("decoder"))


@pytest.fixture(scope="module")
def runs():
    topology = Topology(load_cluster("dgx_a100_40gb", 2))
    counts = {"vision": 12, "text": 2, "decoder": 2}
    ranks = place(counts, 8, 2, "same_node")
    plans = {"vision": PlanChoice(1, 1, 12, 16, "full"), "text": PlanChoice(1, 1, 2, 64, "full"),
             "decoder": PlanChoice(1, 2, 1, 64, "full")}
    out = {s.name: evaluate_submodule(COCA, s, plans[s.name], ranks[s.name], topology, 1024)
           for s in COCA.submodules}
    return topology, out


def test_exchange_bytes_by_hand(runs):
    topology, out = runs
    edges = {(e.producer, e.consumer): e for e in COCA.token_edges()}
    # image tokens: 1024 samples x 257 x 1024 x 2 B to each of the decoder's 2 stages (cross-attention in both),
    # over min(12 vision replicas, 2 receivers) = 2 pairs
    pairs, nbytes = edge_transfer(topology, out, edges["vision", "decoder"], 1024, 2)
    assert len(pairs) == 2 and nbytes == 1024 * 257 * 1024 * 2 * 2 / 2 == 538_968_064
    assert {r for _, r in pairs} == {out["decoder"].gpus[0], out["decoder"].gpus[1]}   # stage 0 and stage 1
    # the unimodal decoder's token states into the multimodal decoder's first stage: 1024 x 76 x 768 x 2 B, 1 pair
    pairs, nbytes = edge_transfer(topology, out, edges["text", "decoder"], 1024, 2)
    assert pairs == [(out["text"].gpus[0], out["decoder"].gpus[0])] and nbytes == 1024 * 76 * 768 * 2
    # the image embeddings to the contrastive loss on the text ranks: 1024 x 768 x 2 B over 2 pairs
    pairs, nbytes = edge_transfer(topology, out, edges["vision", "text"], 1024, 2)
    assert len(pairs) == 2 and nbytes == 1024 * 768 * 2 / 2
    # same_node: every pair inside a node, on NVLink
    assert all(edge_s(topology, out, e, 1024)[1] == "nvlink" for e in edges.values())


def test_only_the_multimodal_decoder_pays_cross_attention(runs):
    _, out = runs
    assert out["text"].cross_attention_s == 0 and out["vision"].cross_attention_s == 0
    assert out["decoder"].cross_attention_s > 0


def _write(tmp_path: Path, plans: str) -> Path:
    path = tmp_path / "coca.yaml"
    path.write_text("system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n  model: {preset: coca-vit-l14}\n"
                    "  global_batch: 1024\n  compare: false\n  placement: same_node\n  plans:\n" + plans)
    return path


def test_three_submodules_run_from_the_cli(tmp_path, capsys, runs):
    topology, out = runs
    path = _write(tmp_path, "    vision: {gpus: 12, micro_batch: 16, recompute: full}\n"
                            "    text: {gpus: 2, micro_batch: 64, recompute: full}\n"
                            "    decoder: {gpus: 2, pp: 2, micro_batch: 64, recompute: full}\n")
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    subs, step = data["submodules"], data["step"]
    assert set(subs) == {"vision", "text", "decoder"} and subs["decoder"]["pp"] == 2
    assert step["step_s"] == pytest.approx(max(s["time"]["step_s"] for s in subs.values()) + step["exchange_s"]
                                           + step["fill_s"] + step["loss_s"])
    # the three exchanges are summed (they end at the decoder's links)
    assert step["exchange_s"] == pytest.approx(sum(edge_s(topology, out, e, 1024)[0] for e in COCA.token_edges()))
    # the contrastive loss runs on the unimodal decoder's ranks (dp 2: b = 512 rows of two b x B fp32 logits)
    assert step["loss_bytes"] == 2 * 512 * 1024 * 4 and step["loss_s"] > 0


def test_bad_coca_plans_exit_2_naming_the_submodule(tmp_path, capsys):
    cases = {
        "    vision: {gpus: 12}\n    text: {gpus: 2}\n": "'decoder' has no plan",
        "    vision: {gpus: 12}\n    text: {gpus: 2}\n    decoder: {gpus: 4}\n": "decoder (4) = 18 != 16",
    }
    for plans, words in cases.items():
        assert main(["run", str(_write(tmp_path, plans))]) == 2
        err = capsys.readouterr().err
        assert "multimodal.plans" in err and words in err and "Traceback" not in err, err


def test_bad_input_from_exits_2_located(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n  model:\n    loss: contrastive+captioning\n"
        "    embed_dim: 8\n    submodules:\n"
        "      vision: {role: vision, layers: 2, hidden: 8, heads: 2, image_size: 28, patch_size: 14, embed_dim: 8}\n"
        "      text: {role: text, layers: 2, hidden: 8, heads: 2, tokens: 4, vocab: 10, embed_dim: 8}\n"
        "      decoder: {role: decoder, layers: 2, hidden: 8, heads: 2, tokens: 4, input_from: txt, embed_dim: 10,\n"
        "                cross_attention_layers: 2}\n  global_batch: 64\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "multimodal.model.submodules.decoder.input_from" in err and "'txt'" in err, err
