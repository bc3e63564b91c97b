"""Activation memory of CoCa's cross-attention blocks and attentional pooler (simulator/multimodal/activations.py),
by hand, item by item, for OpenCLIP's coca_ViT-L-14 (docs/multimodal.md): bf16 activations (2 B), flash
attention, Megatron's accounting, no dropout."""

import pytest

from simulator.hardware import load_cluster
from simulator.memory.estimate import activation_context
from simulator.multimodal.activations import cross_attention_items, pooler_items, submodule_activation_items
from simulator.multimodal.balance import Settings, stage_peaks
from simulator.multimodal.evaluate import PlanChoice, evaluate_submodule, resolve_submodule
from simulator.multimodal.spec import load_multimodal_preset
from simulator.topology import Topology

COCA = load_multimodal_preset("coca-vit-l14")
DECODER, VISION = COCA.submodule("decoder"), COCA.vision


@pytest.fixture(scope="module")
def one_node():
    return Topology(load_cluster("dgx_a100_40gb", 1))


def _block(choice: PlanChoice, recompute: str | None = None) -> dict[str, float]:
    from dataclasses import replace

    plan = resolve_submodule(COCA, DECODER, choice, 256, "bf16", "adam")
    ctx = activation_context(plan)
    if recompute is not None:
        ctx = replace(ctx, recompute=recompute)
    return {name: b for name, b, _ in cross_attention_items(COCA, DECODER, plan, ctx)}


def test_cross_attention_block_bytes_per_sample_by_hand():
    """One cross-attention layer of the CoCa L/14 multimodal decoder, one sample, tp 1: T = 76 text tokens of
    h = 768 (12 heads) read N = 255 pooled image tokens of h_kv = 768; the block's MLP f = 3072 (GeLU).

        query-norm input     2 T h     = 2 x 76 x 768        =   116,736
        Q GEMM input         2 T h                            =   116,736
        K and V GEMM input   2 N h_kv  = 2 x 255 x 768       =   391,680
        Q                    2 T h                            =   116,736
        K, V                 2 x 2 N h                        =   783,360
        flash logsumexp      4 T a     = 4 x 76 x 12         =     3,648
        out-projection input 2 T h                            =   116,736
        MLP norm input       2 T h                            =   116,736
        fc1 input            2 T h                            =   116,736
        GeLU input, fc2 input 2 x 2 T f = 2 x 2 x 76 x 3072  =   933,888
                                                       total = 2,812,992 bytes per sample per layer
    (the stack's own layer, Korthikanti's 34 s h per sample: 1,984,512: the 255 image tokens' K and V make the
    cross-attention block the larger)."""
    items = _block(PlanChoice(1, 1, 8, 1))
    assert items == {"cross.norm_q_in": 116_736, "cross.q_in": 116_736, "cross.kv_in": 391_680,
                     "cross.q": 116_736, "cross.k": 391_680, "cross.v": 391_680, "cross.lse": 3_648,
                     "cross.proj_in": 116_736, "cross.mlp.norm_in": 116_736, "cross.mlp.fc1_in": 116_736,
                     "cross.mlp.act_in": 466_944, "cross.mlp.fc2_in": 466_944}
    assert sum(items.values()) == 2_812_992


def test_cross_attention_block_under_tp_recompute_and_unfused():
    """tp 2 halves what lives inside the TP region (Q, K, V, out-projection input, logsumexp heads, the MLP's f)
    and keeps the replicated norm and GEMM inputs (no sequence parallelism): 116,736 x 4 + 391,680 + 58,368 x 2 +
    195,840 x 2 + 1,824 + 233,472 x 2 = 1,835,808 per sample. Selective recompute (core attention) keeps the
    flash logsumexp, as the engine does; full recompute keeps nothing per block (the layer's checkpointed input
    is the engine's; the image tokens are counted once per stage)."""
    tp2 = _block(PlanChoice(2, 1, 4, 1))
    assert sum(tp2.values()) == 116_736 * 4 + 391_680 + 58_368 * 2 + 195_840 * 2 + 1_824 + 233_472 * 2 == 1_835_808
    assert _block(PlanChoice(1, 1, 8, 1), "full") == {}
    assert sum(_block(PlanChoice(1, 1, 8, 1), "selective").values()) == 2_812_992


def test_unfused_attention_keeps_the_scores():
    """Unfused attention keeps the softmax output a T N x 2 B = 12 x 76 x 255 x 2 = 465,120 per sample instead of
    the 3,648 of the logsumexp."""
    from dataclasses import replace

    plan = resolve_submodule(COCA, DECODER, PlanChoice(1, 1, 8, 1), 256, "bf16", "adam")
    ctx = replace(activation_context(plan), attention="unfused")
    items = {n: b for n, b, _ in cross_attention_items(COCA, DECODER, plan, ctx)}
    assert items["cross.softmax_out"] == 465_120 and "cross.lse" not in items
    assert sum(items.values()) == 2_812_992 - 3_648 + 465_120


def test_pooler_bytes_by_hand():
    """OpenCLIP's CoCa L/14 pooler: 256 queries of w = 768 (8 heads, OpenCLIP's attn_pooler_heads) over the encoder's N = 257 tokens of
    h_v = 1024, a micro-batch of b samples:

        ln_k input, K/V GEMM input 2 x 2 N h_v = 2 x 2 x 257 x 1024 = 1,052,672 b
        Q, out-projection input    2 x 2 q w   = 2 x 2 x 256 x 768  =   786,432 b
        K, V                       2 x 2 N w   = 2 x 2 x 257 x 768  =   789,504 b
        flash logsumexp            4 q a_p     = 4 x 256 x 8        =     8,192 b
        ln_q of the queries        2 q w (one copy, expanded)       =   393,216
    b = 1: 3,030,016 bytes; b = 8: 2,636,800 x 8 + 393,216 = 21,487,616."""
    pool = VISION.attentional_pooler
    for b, total in ((1, 3_030_016), (8, 21_487_616)):
        plan = resolve_submodule(COCA, VISION, PlanChoice(1, 1, 8, b), 256, "bf16", "adam")
        items = pooler_items(pool, 256, VISION, activation_context(plan))
        assert sum(x for _, x, _ in items) == total


def test_stages_hold_their_blocks_times_the_micro_batches_in_flight():
    """Decoder at pp 2 x dp 4, batch 256: 64 samples a replica in 16 micro-batches of 4; batch-sync (GPipe) keeps
    all 16 in flight on both stages, each holding 6 of the 12 blocks: (6 x 2,812,992 + 391,680 image tokens) x 4
    samples x 16 = 1,105,256,448 bytes per stage. The encoder's pooler sits on its last stage only:
    (2,636,800 x 4 + 393,216) x 16 = 175,046,656."""
    plan = resolve_submodule(COCA, DECODER, PlanChoice(1, 2, 4, 4), 256, "bf16", "adam")
    assert plan.num_microbatches == 16
    per_stage = [sum(i.bytes for i in items) for items in submodule_activation_items(COCA, DECODER, plan)]
    assert per_stage == [(6 * 2_812_992 + 391_680) * 4 * 16] * 2 == [1_105_256_448] * 2
    plan = resolve_submodule(COCA, VISION, PlanChoice(1, 2, 4, 4), 256, "bf16", "adam")
    per_stage = [sum(i.bytes for i in items) for items in submodule_activation_items(COCA, VISION, plan)]
    assert per_stage == [0.0, (2_636_800 * 4 + 393_216) * 16] == [0.0, 175_046_656]


def test_run_memory_and_json_include_them_and_the_search_sees_the_same_peaks(one_node):
    """The run's stage peaks, its JSON stages (activations, total, extra_activations, peak) and the peaks the
    search checks against the GPU's memory all carry the new items."""
    choice = PlanChoice(1, 2, 4, 4, "none")
    for sub in (DECODER, VISION):
        run = evaluate_submodule(COCA, sub, choice, tuple(range(8)), one_node, 256)
        extra = run.extra_activation_bytes
        assert max(extra) > 0
        stages = run.to_dict()["memory"]["stages"]
        for st, engine, act, peak in zip(stages, run.memory.stages, extra, run.stage_peaks, strict=True):
            assert st["extra_activations"] == act
            assert st["activations"] == pytest.approx(engine.bucket("activations") + act)
            assert st["total"] == pytest.approx(engine.total + act)
            assert st["peak"] == peak
        assert run.stage_peaks[0] == pytest.approx(run.memory.stages[0].peak + run.extra_bytes + extra[0])
        settings = Settings(COCA, one_node, 256)
        assert stage_peaks(settings, sub, choice) == pytest.approx(list(run.stage_peaks))


def test_report_json_and_trace_carry_them(tmp_path, capsys):
    """``simulator run`` on CoCa L/14 with selective recompute (the blocks' activations are kept): the JSON stages
    of the decoder and the encoder's last stage carry the new items, the device peak counts them, and the trace
    shows the cross-attention and pooler GEMMs the engine's timeline lacks, with the seconds the step adds."""
    import json

    from simulator.cli import main

    path = tmp_path / "coca.yaml"
    path.write_text("system: {profile: dgx_a100_40gb, nodes: 2}\nmultimodal:\n  model: {preset: coca-vit-l14}\n"
                    "  global_batch: 256\n  compare: false\n  placement: same_node\n  plans:\n"
                    "    vision: {gpus: 12, pp: 2, micro_batch: 8, recompute: selective}\n"
                    "    text: {gpus: 2, micro_batch: 16, recompute: selective}\n"
                    "    decoder: {gpus: 2, micro_batch: 16, recompute: selective}\n")
    trace = tmp_path / "t.json"
    assert main(["run", str(path), "--json", "--trace", str(trace)]) == 0
    data = json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]   # then the trace's path
    dec, vis = data["submodules"]["decoder"], data["submodules"]["vision"]
    # decoder, dp 2: 128 samples a replica, 8 micro-batches of 16 in flight (GPipe), 12 blocks of 2,812,992 B a
    # sample plus the 391,680 B of image tokens
    assert dec["memory"]["stages"][0]["extra_activations"] == (12 * 2_812_992 + 391_680) * 16 * 8
    # vision, dp 6 x pp 2: ceil(256 / 6) = 43 samples a replica -> 6 micro-batches of 8 (padded to 48), all in flight
    # on the last stage: (2,636,800 x 8 + 393,216) x 6 = 128,925,696
    assert [s["extra_activations"] for s in vis["memory"]["stages"]] == [0.0, (2_636_800 * 8 + 393_216) * 6]
    for sub in (dec, vis):
        assert sub["memory"]["device_peak_bytes"] >= max(s["peak"] for s in sub["memory"]["stages"])
    events = json.loads(trace.read_text())["traceEvents"]
    extra = {e["name"]: e["dur"] for e in events if e["ph"] == "X" and e["name"].endswith("GEMMs")}
    assert extra["cross-attention GEMMs"] == pytest.approx(dec["time"]["cross_attention_s"] * 1e6)
    assert extra["attentional pooler GEMMs"] == pytest.approx(vis["time"]["pooler_s"] * 1e6)
    assert main(["run", str(path)]) == 0 and "decoder" in capsys.readouterr().out
