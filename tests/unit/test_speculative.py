"""Speculative decoding (serving.speculative; docs/speculative.md): the expected tokens per iteration, the verify
step as a batch of k + 1 tokens per sequence, the draft's memory and the input errors, by hand."""

from dataclasses import replace

import pytest

from simulator.cli import main
from simulator.entries.serve import serving_context, simulate_serving
from simulator.errors import UserError
from simulator.implementation.speculative import SpeculativeConfig
from simulator.plan import Batch
from simulator.program import serving_head_program
from simulator.program.serving import cache_attention
from simulator.scenario import load_scenario
from simulator.serving import backends as B
from simulator.serving.speculative import draft_bytes, iteration
from simulator.serving.step import step_time

#: a small GQA model (4 layers, hidden 1024, 8 query / 2 K/V heads of 128, SwiGLU 4096, vocab 32000)
MODEL = {"name": "small", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 2, "ffn_hidden": 4096,
         "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm"}
SPEC = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.8}


def scenario(spec=None, model=None, **serving) -> dict:
    s = {"batch": 4, "input_len": 1000, "output_len": 64, **serving}
    if spec is not None:
        s["speculative"] = spec
    return {"name": "spec", "system": {"profile": "hgx_h200", "gpus": 1}, "model": model or dict(MODEL),
            "training": {"mode": "inference", "precision": "bf16"}, "serving": s}


def test_expected_tokens_by_hand():
    """E = 1 + sum_i prod_{j<=i} a_j: one a = 0.8 over k = 3 is 1 + 0.8 + 0.64 + 0.512 = 2.952 = (1 - 0.8^4) / 0.2;
    a per-position list (0.9, 0.5, 0.2) gives 1 + 0.9 + 0.45 + 0.09 = 2.44; a given length passes through."""
    one = SpeculativeConfig(method="mtp", num_speculative_tokens=3, acceptance_rate=0.8)
    assert one.expected_tokens() == pytest.approx(2.952, rel=1e-12)
    assert one.expected_tokens() == pytest.approx((1 - 0.8 ** 4) / (1 - 0.8), rel=1e-12)
    per = SpeculativeConfig(method="mtp", num_speculative_tokens=3, acceptance_rate=(0.9, 0.5, 0.2))
    assert per.expected_tokens() == pytest.approx(2.44, rel=1e-12)
    assert SpeculativeConfig(method="mtp", num_speculative_tokens=2, acceptance_length=2.5).expected_tokens() == 2.5
    assert SpeculativeConfig(method="mtp", num_speculative_tokens=4, acceptance_rate=0.0).expected_tokens() == 1.0
    assert SpeculativeConfig(method="mtp", num_speculative_tokens=4, acceptance_rate=1.0).expected_tokens() == 5.0


def test_verify_is_a_batch_of_k_plus_one_tokens_with_its_cache_read():
    """Verify of k = 3 over 4 sequences at 1000 cached tokens: 16 new tokens, the decode kernel reading 4 x 1004
    cached tokens x (2 K/V heads x 128 x 2 x 2 B) per layer, causal FLOPs 2 x 4 x 4 x (1000 + 2.5) x 256 x 8 heads,
    and logits for all 16 positions (the LM head GEMM has 16 rows)."""
    sc = load_scenario(scenario(SPEC))
    rp, kv = sc.plan, 2 * 128 * 2 * 2
    verify = Batch(4, 4, 1000)
    att = cache_attention(rp, verify, kv, B.ATTENTION_KERNELS["flash_decoding"], verify=True)
    assert att.decode and att.kv_bytes == 4 * 1004 * kv
    assert att.flops == pytest.approx(2 * 4 * 4 * (1000 + 2.5) * 256 * 8, rel=1e-12)
    prefill = cache_attention(rp, verify, kv, B.ATTENTION_KERNELS["flash_decoding"])
    assert not prefill.decode  # without verify a 4-token chunk is prefill work
    head = serving_head_program(rp, Batch(verify.tokens, 1, 1000), "bf16", "bf16")
    assert head.gemms[0].m == 16
    ctx, _ = serving_context(sc)
    it = iteration(ctx, rp, 4, 1000)
    assert it.verify == step_time(ctx, rp, verify, phase="verify", graphs=True)
    assert it.expected_tokens == pytest.approx(2.952)


def test_tpot_is_the_iteration_over_the_expected_tokens():
    """The static batch's decode step is one iteration (3 draft passes + verify) over E = 2.952; at batch 4 the step
    is weight-bound, so verifying 4 tokens costs far less than 4 decode steps and speculation wins."""
    plain = simulate_serving(load_scenario(scenario()))
    spec = simulate_serving(load_scenario(scenario(SPEC)))
    it = spec.header["speculative"]
    assert spec.decode.step_s == pytest.approx(it["iteration_s"] / 2.952, rel=1e-12)
    assert it["iteration_s"] == pytest.approx(it["draft_s"] + it["verify_s"], rel=1e-12)
    assert plain.decode.step_s < it["verify_s"] < 2 * plain.decode.step_s
    assert spec.tpot_s < plain.tpot_s


def test_eagle_head_memory_by_hand():
    """An EAGLE head of the small model: one decoder layer (q 1024x1024, k and v 1024x256, o 1024x1024, gate/up
    2 x 1024x4096, down 4096x1024, two norms of 1024) + fc 2048x1024, in bf16; its K/V is one layer's."""
    sc = load_scenario(scenario(SPEC))
    ctx, memory = serving_context(sc)
    layer = 1024 * 1024 * 2 + 2 * 1024 * 256 + 3 * 1024 * 4096 + 2 * 1024
    weights, kv_token, _ = draft_bytes(ctx, sc.plan)
    assert weights == (layer + 2048 * 1024) * 2
    assert kv_token == 2 * 128 * 2 * 2
    plain = serving_context(load_scenario(scenario()))[1]
    assert memory.stages[0].bucket("weights") == plain.stages[0].bucket("weights") + weights
    added = memory.stages[0].bucket("other") - plain.stages[0].bucket("other")
    assert added == pytest.approx(plain.stages[0].bucket("other") / 4)  # 1 draft layer beside 4 target layers


def test_mtp_needs_mtp_modules_and_eagle3_its_own_vocabulary():
    ctx, _ = serving_context(load_scenario(scenario(SPEC)))
    mtp = replace(ctx, serving=ctx.serving.model_copy(update={"speculative": SpeculativeConfig(
        method="mtp", num_speculative_tokens=1, acceptance_rate=0.8)}))
    with pytest.raises(UserError, match="mtp_layers 0"):
        iteration(mtp, load_scenario(scenario(SPEC)).plan, 1, 100)
    sc = load_scenario(scenario({**SPEC, "method": "eagle3", "draft_vocab": 1000}))
    ctx, _ = serving_context(sc)
    weights, _, _ = draft_bytes(ctx, sc.plan)
    layer = 1024 * 1024 * 2 + 2 * 1024 * 256 + 3 * 1024 * 4096 + 2 * 1024
    # fc 3h -> h, a 1,000-token head, and q/k/v reading 2h (the second h: 1024 x (8 + 2 x 2) heads x 128)
    assert weights == (layer + 3072 * 1024 + 1000 * 1024 + 1024 * (1024 + 2 * 256)) * 2


@pytest.mark.parametrize(("spec", "serving", "model", "key", "rule"), [
    ({**SPEC, "acceptance_rate": 1.5}, {}, None, "serving.speculative.acceptance_rate", r"\[0, 1\]"),
    ({**SPEC, "acceptance_rate": -0.1}, {}, None, "serving.speculative.acceptance_rate", r"\[0, 1\]"),
    ({**SPEC, "acceptance_rate": [0.9, 0.8]}, {}, None, "serving.speculative.acceptance_rate", "one per drafted"),
    ({**SPEC, "acceptance_length": 2.0}, {}, None, "serving.speculative.acceptance_rate", "exactly one"),
    ({**SPEC, "num_speculative_tokens": 8}, {"output_len": 8}, None, "serving.speculative.num_speculative_tokens",
     "longer than the output_len"),
    ({**SPEC, "num_speculative_tokens": 3}, {}, {**MODEL, "position_embedding": "learned", "max_position": 1066},
     "serving.speculative.num_speculative_tokens", "longer than the context"),
    ({"method": "draft_model", "num_speculative_tokens": 2, "acceptance_rate": 0.7,
      "draft_model": {**MODEL, "layers": 1, "position_embedding": "learned", "max_position": 1065}}, {}, None,
     "serving.speculative.draft_model", "longer than the context"),
    ({**SPEC, "method": "draft_model"}, {}, None, "serving.speculative.draft_model", "needs draft_model"),
])
def test_bad_speculation_exits_2_with_file_line_key_and_rule(tmp_path, capsys, spec, serving, model, key, rule):
    import yaml

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(scenario(spec, model, **serving), sort_keys=False))
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and key in err
    assert pytest.importorskip("re").search(rule, err)


def test_draft_model_passes_are_decode_steps_of_the_draft_on_the_targets_tp():
    """method draft_model: k = 2 passes of the draft model (here 2 layers of the small model's shape) on the target's
    TP degree: the first over each sequence's accepted tokens, ceil(E) = ceil(1 + 0.7 + 0.49) = 3 per sequence at
    1000 cached, the second one row per sequence (a chain) at 1001; its weights are the whole draft model's."""
    from simulator.plan import resolve_plan
    from simulator.plan.params import stage_params

    draft = {**MODEL, "layers": 2}
    spec = {"method": "draft_model", "num_speculative_tokens": 2, "acceptance_rate": 0.7, "draft_model": draft}
    sc = load_scenario(scenario(spec))
    ctx, _ = serving_context(sc)
    assert ctx.draft_model.layers == 2
    it = iteration(ctx, sc.plan, 4, 1000)
    training = {**sc.plan.training.model_dump(exclude_defaults=True), "global_batch": 4}
    drp = resolve_plan(ctx.draft_model, {"tp": 1}, training, 1)
    dctx = replace(ctx, model=ctx.draft_model)
    passes = [step_time(dctx, drp, Batch(4, n, 1000 + i), phase="decode", graphs=True).step_s
              for i, n in ((0, 3), (1, 1))]
    assert it.draft_s == pytest.approx(sum(passes), rel=1e-12)
    weights, kv_token, _ = draft_bytes(ctx, sc.plan)
    sp = stage_params(drp, 0)
    assert weights == (sp.dense + sp.expert) * 2 and kv_token == 2 * (2 * 128 * 2 * 2)


def test_mtp_drafts_with_the_last_layers_kind_and_counts_the_module():
    """method mtp on a small MoE model with one MTP module: a draft pass prices the last (MoE) layer, the shared
    embedding and LM head and the 2h -> h eh_proj; the module's weights are its layer plus enorm, hnorm and eh_proj."""
    from simulator.model.params import layer_params, mtp_head_params

    moe = {**MODEL, "mtp_layers": 1, "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 512,
                                               "first_dense_layers": 1}}
    spec = {"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.9}
    sc = load_scenario(scenario(spec, moe))
    ctx, _ = serving_context(sc)
    it = iteration(ctx, sc.plan, 2, 500)
    assert it.expected_tokens == pytest.approx(1.9)
    weights, _, _ = draft_bytes(ctx, sc.plan)
    module = sum(t.numel for t in mtp_head_params(sc.model) + layer_params(sc.model, sc.model.layers))
    assert weights == module * 2
    from simulator.serving.speculative import _gemm_s, drafter

    d = drafter(ctx, sc.plan)
    assert d.plan.stage_layers == ((3,),) and sc.model.is_moe_layer(3) and d.fc_inputs == 2
    # k = 1: one pass, over the ceil(1.9) = 2 accepted tokens of each sequence, and eh_proj over those 4 rows
    one = step_time(replace(ctx, model=d.plan.model), d.plan, Batch(2, 2, 500), phase="decode", graphs=True)
    assert one.breakdown_s["experts"] > 0  # the MTP layer is MoE, as the last layer
    assert it.draft_s == pytest.approx(one.step_s + _gemm_s(ctx, d, "fc", 4, 2 * 1024, 1024), rel=1e-12)
