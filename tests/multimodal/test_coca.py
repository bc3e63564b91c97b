"""CoCa as CoCa is built (Yu et al. 2022, section 3.2): an image encoder with an attentional pooler, a unimodal text
decoder and a multimodal text decoder with cross-attention to the pooled image tokens; contrastive + captioning
losses (docs/multimodal.md). Numbers by hand: the cross-attention and pooler FLOPs, their parameters, and the bytes
each exchange sends; the L/14 preset against OpenCLIP's own profile of coca_ViT-L-14
(https://github.com/mlfoundations/open_clip/blob/main/docs/model_profile.csv: 638.45M parameters, image 306.72M, text
123.65M; 214.52 GFLOPs per sample, image 163.64, text 13.3; ViT-L-14's image tower: 303.97M, 162.03 GFLOPs)."""

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
    # the image encoder's attentional pooler: 256 queries of width 768; the first is the contrastive embedding, the
    # decoder cross-attends the other 255 (OpenCLIP VisionTransformer, attentional_pool: true, pool_type 'tok')
    assert vision.attentional_pooler.tokens_out == 255 and COCA.image_kv == (255, 768)
    assert decoder.cross_attention_mlp


def test_pooler_by_hand_and_against_openclip():
    vision = COCA.vision
    pool = vision.attentional_pooler
    # queries 256 x 768; Q, O 768 x 768; K, V 1024 x 768; in_proj and out_proj biases 4 x 768; ln_q 2 x 768, ln_k
    # 2 x 1024
    by_hand = 256 * 768 + 2 * 768**2 + 2 * 1024 * 768 + 4 * 768 + 2 * 768 + 2 * 1024
    assert COCA.pooler_params(vision) == by_hand == 2_955_776
    # the tower: ViT-L/14 (OpenCLIP ViT-L-14 image tower 303.97M) + the pooler; the engine's stand-in output layer
    # (768 x 1024 projection, 2 x 1024 final norm) is 196,608 + 512 larger than OpenCLIP's after pooling (768 x 768,
    # 2 x 768): without that, 306.72M as OpenCLIP's profile says
    tower = param_counts(vision.engine_model(257))["total"] + COCA.extra_params(vision)
    assert tower - 196_608 - 512 == pytest.approx(306.72e6, abs=0.005e6)
    # forward FLOPs per sample: Q and O of the queries 4 q w^2, K and V of the 257 tokens 4 N h_v w, scores and
    # values 4 q N w = 603,979,776 + 808,452,096 + 202,113,024; OpenCLIP: 163.64 - 162.03 = 1.61 GFLOPs
    m, k, n, b = cross_attention_gemms(1, pool.queries, vision.own_tokens, pool.width, vision.hidden, pool.heads)
    assert 2 * (m * k * n * b).sum() == 1_614_544_896
    assert 1_614_544_896 / 1e9 == pytest.approx(163.64 - 162.03, abs=0.01)


def test_papers_design_has_a_pooler_per_loss():
    """The CoCa paper's design (coca-g): a pooler of 256 queries for the decoder and one of 1 query for the
    contrastive embedding, both of the decoder's width 1408 over the 256 ViT-giant tokens of width 1408."""
    spec = load_multimodal_preset("coca-g")
    pool = spec.vision.attentional_pooler
    assert pool.query_counts == (256, 1) and spec.image_kv == (256, 1408)
    per = 2 * 1408**2 + 2 * 1408**2 + 4 * 1408 + 2 * 1408 + 2 * 1408
    assert spec.pooler_params(spec.vision) == 256 * 1408 + per + 1 * 1408 + per
    # attention-only cross blocks (the layer's one MLP is the stack's): Q, O, K, V 1408^2 each, biases, two norms
    decoder = spec.submodule("decoder")
    assert not decoder.cross_attention_mlp
    assert spec.cross_block_params(decoder) == 4 * 1408**2 + 4 * 1408 + 2 * 1408 + 2 * 1408


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
    # an MLP of f = 3072 in the block adds its up and down projections, 2 x 2 T h f
    m3, k3, n3, b3 = cross_attention_gemms(1, T, N, h, hv, 12, mlp=3072)
    assert 2 * (m3 * k3 * n3 * b3).sum() - 1_047_760_896 == 4 * T * h * 3072 == 717_225_984


def test_decoder_flops_match_openclip():
    """The multimodal decoder's forward FLOPs per sample, as the model prices them: 12 self-attention layers over
    76 tokens (12 h^2 GEMMs, full Q K^T and P V), 12 cross-attention blocks with their MLPs over the 255 pooled
    tokens (cross_attention_gemms at the preset's image_kv), the 49,408-token head: 37.58 GFLOPs, OpenCLIP's
    214.52 - 163.64 - 13.3."""
    decoder = COCA.submodule("decoder")
    T, h = decoder.tokens, decoder.hidden
    tokens, width = COCA.image_kv
    m, k, n, b = cross_attention_gemms(1, T, tokens, h, width, decoder.heads, mlp=4 * h)
    cross = 2 * (m * k * n * b).sum()
    assert cross == 1_557_688_320
    total = 12 * (2 * T * 12 * h * h + 2 * 2 * T * T * h) + 12 * cross + 2 * T * h * 49408
    assert total == 37_582_946_304
    assert total / 1e9 == pytest.approx(214.52 - 163.64 - 13.3, abs=0.01)


def test_decoder_parameters_by_hand():
    decoder = COCA.submodule("decoder")
    # a cross-attention block as OpenCLIP builds it (ResidualAttentionBlock(768, 12, is_cross_attention=True)): Q,
    # K, V, O 768 x 768 (the pooled tokens are 768 wide) and their biases, norms on the queries and the image tokens,
    # an MLP 768 -> 3072 -> 768 with biases and its norm: 12 h^2 + 13 h + 2 h (ln_1_kv)
    block = 4 * 768**2 + 4 * 768 + 2 * 768 + 2 * 768 + 2 * 768 * 3072 + 3072 + 768 + 2 * 768
    assert COCA.cross_block_params(decoder) == block == 12 * 768**2 + 15 * 768 == 7_089_408
    cross = 12 * block
    # no input table of its own (the engine's 49,408 x 768 stand-in comes off), the captioning head stays
    assert COCA.extra_params(decoder) == cross - 49408 * 768
    # 12 layers of 12 h^2 + 13 h, the head 49,408 x 768, 76 positions, the final norm, the cross-attention
    total = 12 * (12 * 768**2 + 13 * 768) + 49408 * 768 + 76 * 768 + 2 * 768 + cross
    assert param_counts(decoder.engine_model(76))["total"] + COCA.extra_params(decoder) == total == 208_132_608
    # OpenCLIP's decoder (638.45 - 306.72 - 123.65 = 208.08M) has no position table of its own (76 x 768)
    assert (total - 76 * 768) / 1e6 == pytest.approx(638.45 - 306.72 - 123.65, abs=0.01)


def test_token_edges():
    edges = {(e.producer, e.consumer): e for e in COCA.token_edges()}
    assert edges == {
        ("vision", "decoder"): TokenEdge("vision", "decoder", 255 * 768, "image_tokens", cross_attention=True),
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
    # pooled image tokens: 1024 samples x 255 x 768 x 2 B to each of the decoder's 2 stages (cross-attention in
    # both), over min(12 vision replicas, 2 receivers) = 2 pairs
    pairs, nbytes = edge_transfer(topology, out, edges["vision", "decoder"], 1024, 2)
    assert len(pairs) == 2 and nbytes == 1024 * 255 * 768 * 2 * 2 / 2 == 401_080_320
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
    # and only the image encoder its pooler, on its step and its last stage's memory
    assert out["vision"].pooler_s > 0 and out["text"].pooler_s == out["decoder"].pooler_s == 0
    v = out["vision"]
    assert v.step_s == pytest.approx(v.step.step_s + v.pooler_s)
    assert v.pooler_bytes == pytest.approx(18 * COCA.pooler_params(COCA.vision))   # bf16 + Adam, 18 B per parameter
    # the last stage also keeps the pooler's activations (tests/multimodal/test_activations.py by hand)
    assert v.extra_activation_bytes[-1] > 0
    assert v.stage_peaks[-1] == pytest.approx(v.memory.stages[-1].peak + v.extra_bytes + v.pooler_bytes
                                              + v.extra_activation_bytes[-1])


def test_pooler_time_by_hand(runs):
    """The pooler's seconds: its GEMMs (cross_attention_gemms with the 256 queries over the 257 tokens) for one
    micro-batch of 16 at the engine's GEMM efficiency, x3 (forward + backward), x the replica's 6 micro-batches
    (1024 / 12 replicas = 86 samples, 6 micro-batches of 16 after padding)."""
    from simulator.compute import default_efficiency
    from simulator.compute.gemm import gemm_times

    _, out = runs
    v = out["vision"]
    gpu = load_cluster("dgx_a100_40gb", 2).node.gpu
    gemms = cross_attention_gemms(16, 256, 257, 768, 1024, 8)
    fwd = float(gemm_times(*gemms, gpu, default_efficiency(gpu.architecture), "bf16").sum())
    assert v.plan.num_microbatches == 6
    assert v.pooler_s == pytest.approx(3 * fwd * 6, rel=1e-12)


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


def test_bad_pooler_fields_exit_2_located(tmp_path, capsys):
    base = ("system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n  model:\n    loss: contrastive+captioning\n"
            "    embed_dim: 8\n    submodules:\n"
            "      vision: {role: vision, layers: 2, hidden: 8, heads: 2, image_size: 28, patch_size: 14, embed_dim: 8%s}\n"
            "      text: {role: text, layers: 2, hidden: 8, heads: 2, tokens: 4, vocab: 10, embed_dim: 8%s}\n"
            "      decoder: {role: decoder, layers: 2, hidden: 8, heads: 2, tokens: 4, input_from: text, embed_dim: 10,\n"
            "                cross_attention_layers: 2}\n  global_batch: 64\n")
    pool = ", attentional_pooler: {queries: 4, width: 8, heads: 2, contrastive: first_query}"
    cases = {
        ("", pool): ("multimodal.model.submodules.text.attentional_pooler", "only a vision submodule"),
        (pool.replace("first_query", "last"), ""): ("multimodal.model.submodules.vision.attentional_pooler.contrastive",
                                                    "first_query"),
        ("", ", cross_attention_mlp: true"): ("multimodal.model.submodules.text.cross_attention_mlp",
                                              "needs cross_attention_layers"),
    }
    for (vision, text), (key, words) in cases.items():
        path = tmp_path / "bad.yaml"
        path.write_text(base % (vision, text))
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err
        assert key in err and words in err and "Traceback" not in err, err
