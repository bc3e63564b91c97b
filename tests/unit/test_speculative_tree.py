"""Speculative decoding as SGLang's EAGLE worker runs it (docs/speculative.md, "The iteration"): tree drafts
(``topk``, ``num_draft_tokens``), the draft's first pass over the accepted tokens, the heads' own GEMMs, the host
time per iteration where the engine drops its overlap, and the new keys' errors, by hand."""

from dataclasses import replace

import pytest
import yaml

from simulator.cli import main
from simulator.entries.serve import serving_context
from simulator.implementation.host import EngineHost
from simulator.plan import Batch
from simulator.program import serving_head_program
from simulator.program.serving import cache_attention
from simulator.scenario import load_scenario
from simulator.serving import backends as B
from simulator.serving.host import with_host
from simulator.serving.loop import LoopCosts
from simulator.serving.speculative import _gemm_s, _head_s, drafter, iteration
from simulator.serving.step import step_time

#: the small GQA model of tests/unit/test_speculative.py (hidden 1024, 8 query / 2 K/V heads of 128, vocab 32000)
MODEL = {"name": "small", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 2, "ffn_hidden": 4096,
         "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm"}
#: a tree of depth 3, 4 branches per node, 10 nodes verified per sequence (the root included), E = 2.5
TREE = {"method": "eagle", "num_speculative_tokens": 3, "topk": 4, "num_draft_tokens": 10, "acceptance_length": 2.5}
#: the engine core's host time: 2 ms a step + 0.1 ms a sequence
HOST = {"step_s": 2e-3, "seq_s": 1e-4}


def scenario(spec, framework="sglang", **serving) -> dict:
    s = {"batch": 4, "input_len": 1000, "output_len": 64, "speculative": spec, **serving}
    return {"name": "tree", "system": {"profile": "hgx_h200", "gpus": 1}, "model": dict(MODEL),
            "training": {"mode": "inference", "precision": "bf16", "framework": framework}, "serving": s}


@pytest.fixture(scope="module")
def tree():
    sc = load_scenario(scenario(TREE, host=HOST))
    ctx, _ = serving_context(sc)
    return sc, ctx, iteration(ctx, sc.plan, 4, 1000)


def test_tree_verify_runs_num_draft_tokens_per_sequence(tree):
    """The verify of a 10-node tree over 4 sequences at 1000 cached: 40 new tokens, the decode kernel over 10 query
    rows per sequence reading 4 x (1000 + 10) cached tokens x (2 K/V heads x 128 x 2 x 2 B) per layer, FLOPs
    2 x 4 x 10 x (1000 + 5.5) x 256 x 8 heads (row i of 10 attends 1000 + i keys, the masked tile computed as the
    tree-mask kernel does), and logits for all 40 nodes: not the k + 1 = 4 rows per sequence of a chain."""
    sc, ctx, it = tree
    rp, kv = sc.plan, 2 * 128 * 2 * 2
    batch = Batch(4, 10, 1000)
    att = cache_attention(rp, batch, kv, B.ATTENTION_KERNELS["flash_decoding"], verify=True)
    assert att.decode and att.kv_bytes == 4 * 1010 * kv
    assert att.flops == pytest.approx(2 * 4 * 10 * (1000 + 5.5) * 256 * 8, rel=1e-12)
    assert serving_head_program(rp, Batch(40, 1, 1000), "bf16", "bf16").gemms[0].m == 40
    assert it.verified_tokens == 10 and it.topk == 4
    assert it.verify == step_time(ctx, rp, batch, phase="verify", graphs=True)
    chain = load_scenario(scenario({**TREE, "topk": 1, "num_draft_tokens": None}, host=HOST))
    assert chain.serving.speculative.verified_tokens() == 4


def test_one_iteration_from_its_parts_by_hand(tree):
    """iteration = draft + verify + host: the draft's first pass over ceil(2.5) = 3 accepted tokens per sequence
    (fc 2h -> h over 12 rows), then k - 1 = 2 passes over 4 x topk 4 = 16 rows at 1001 and 1002 cached (fc over 16
    rows each); the host 2 ms + 4 x 0.1 ms = 2.4 ms after the GPU work (SGLang drops its overlap under speculation);
    E = 2.5 tokens per sequence."""
    sc, ctx, it = tree
    d = drafter(ctx, sc.plan)
    dctx = replace(ctx, model=d.plan.model)
    fc = [_gemm_s(ctx, d, "fc", rows, 2 * 1024, 1024) for rows in (12, 16, 16)]
    passes = [step_time(dctx, d.plan, b, phase="decode", graphs=True).step_s
              for b in (Batch(4, 3, 1000), Batch(16, 1, 1001), Batch(16, 1, 1002))]
    assert it.draft_s == pytest.approx(sum(passes) + sum(fc), rel=1e-12)
    assert it.host_s == pytest.approx(2.4e-3, rel=1e-12)
    assert it.iteration_s == pytest.approx(it.draft_s + it.verify.step_s + 2.4e-3, rel=1e-12)
    per = it.per_token()
    assert per.step_s == pytest.approx(it.iteration_s / 2.5, rel=1e-12)
    assert per.breakdown_s["host"] == pytest.approx(2.4e-3 / 2.5 + it.verify.breakdown_s["host"] / 2.5, rel=1e-12)


def test_host_hidden_where_the_engine_keeps_its_overlap():
    """An engine that keeps its overlap under speculation (speculative_overlap true) pays the host only where it
    exceeds the iteration's GPU time: 10 us under the GPU iteration adds nothing; 1 s adds 1 s - GPU."""
    for host, expect in (({"step_s": 1e-5, "overlap": True, "speculative_overlap": True}, 0.0),
                         ({"step_s": 1.0, "overlap": True, "speculative_overlap": True}, None)):
        sc = load_scenario(scenario(TREE, host=host))
        ctx, _ = serving_context(sc)
        it = iteration(ctx, sc.plan, 4, 1000)
        gpu = it.draft_s + it.verify.step_s
        assert it.host_s == pytest.approx(1.0 - gpu if expect is None else 0.0, abs=1e-15)


def test_the_loop_does_not_pay_the_iteration_host_twice():
    """Under speculation a decode step's price already holds the host time (per iteration, over E): the loop adds
    only the API server's floor (0.1 ms x 4 sequences); a prefill step takes the host without overlap."""
    costs = LoopCosts(decode_s=lambda seqs, context: 0.01, prefill_s=lambda seqs, new, past: 0.02)
    host = EngineHost(step_s=5e-3, overlap=True, speculative_overlap=False, token_s=1e-4)
    plain, spec = with_host(costs, host), with_host(costs, host, speculative=True)
    assert plain.decode_s(4, 100) == 0.01 and plain.prefill_s(1, 10, 0) == 0.02   # overlapped: max(GPU, 5 ms)
    assert spec.decode_s(4, 100) == 0.01 and spec.decode_s(200, 100) == pytest.approx(0.02)
    assert spec.prefill_s(1, 10, 0) == pytest.approx(0.025)


def test_eagle3_fc_on_the_first_pass_only_and_qkv_over_2h():
    """EAGLE-3's fc (3h -> h) runs on the first pass only (later passes feed the head's own h-wide state); every
    pass its q/k/v also reads the second h (1024 x (8 + 2 x 2) x 128 outputs); EAGLE-1's fc (2h -> h) every pass."""
    sc = load_scenario(scenario({**TREE, "method": "eagle3"}))
    ctx, _ = serving_context(sc)
    d = drafter(ctx, sc.plan)
    qkv = _gemm_s(ctx, d, "qkv", 16, 1024, 12 * 128)
    assert _head_s(ctx, d, 16, False) == pytest.approx(qkv, rel=1e-12)
    assert _head_s(ctx, d, 12, True) == pytest.approx(
        _gemm_s(ctx, d, "fc", 12, 3 * 1024, 1024) + _gemm_s(ctx, d, "qkv", 12, 1024, 12 * 128), rel=1e-12)
    sc1 = load_scenario(scenario(TREE))
    ctx1, _ = serving_context(sc1)
    d1 = drafter(ctx1, sc1.plan)
    assert _head_s(ctx1, d1, 16, False) == pytest.approx(_gemm_s(ctx1, d1, "fc", 16, 2 * 1024, 1024), rel=1e-12)


def test_an_eager_first_pass_pays_the_host_launches():
    """draft_extend_graph false (SGLang before PR #6606): the first pass is issued kernel by kernel, so it takes at
    least its kernels x host_launch_s; never less than the captured pass."""
    sc = load_scenario(scenario(TREE))
    eager = load_scenario(scenario({**TREE, "draft_extend_graph": False}))
    captured = iteration(serving_context(sc)[0], sc.plan, 4, 1000)
    issued = iteration(serving_context(eager)[0], eager.plan, 4, 1000)
    assert issued.draft_s >= captured.draft_s and issued.verify == captured.verify


@pytest.mark.parametrize(("spec", "key", "rule"), [
    ({**TREE, "topk": 0}, "serving.speculative.topk", "greater than or equal to 1"),
    ({**TREE, "num_draft_tokens": 3}, "serving.speculative.num_draft_tokens", "fewer than the k \\+ 1 = 4"),
    # depth 3, topk 4: 4 + 2 x 16 = 36 nodes, so at most 37 with the root
    ({**TREE, "num_draft_tokens": 38}, "serving.speculative.num_draft_tokens", "the 36 nodes"),
    ({**TREE, "acceptance_length": None, "acceptance_rate": 0.7}, "serving.speculative.acceptance_rate",
     "describes a chain"),
    ({**TREE, "acceptance_length": 4.5}, "serving.speculative.acceptance_length", "k \\+ 1 = 4"),
])
def test_bad_tree_exits_2_with_file_line_key_and_rule(tmp_path, capsys, spec, key, rule):
    import re

    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(scenario(spec), sort_keys=False))
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and key in err
    assert re.search(rule, err), err
