"""Sliding-window attention and multi-token prediction (issue 11, item 7), checked by hand."""

import json

import pytest

from simulator.errors import UserError
from simulator.model import (
    layer_flops,
    load_hf_config,
    load_model_preset,
    model_flops,
    param_counts,
)
from simulator.model.flops import window_density
from simulator.plan import resolve_plan
from simulator.plan.shape import rank_shape


def test_window_density_counts_the_band_of_a_causal_mask():
    """s = 8, w = 3: queries see 1, 2, 3, 3, 3, 3, 3, 3 keys = 21 = 3*8 - 3*2/2 of 64 pairs; w >= s is causal."""
    assert window_density(8, 3) == 21 / 64
    assert window_density(8, 8) == window_density(8, None) == 0.5


def test_gpt_oss_alternates_windowed_and_full_layers():
    """gpt-oss-120b: 128-token window on even layers. At s = 8192 a windowed layer's core attention is
    (128*8192 - 128*127/2)/8192^2 / (1/2) = 3.1% of a full causal layer's; projections are equal."""
    m = load_model_preset("gpt-oss-120b")
    assert [m.attention_window(i) for i in range(4)] == [128, None, 128, None]
    sh = rank_shape(m, 8192, 1)
    core = [sum(o.flops for o in layer_flops(m, sh, layer_index=i).ops if o.name.startswith("attn.")) for i in (0, 1)]
    assert core[0] / core[1] == pytest.approx((128 * 8192 - 128 * 127 / 2) / 8192**2 / 0.5, rel=1e-12)


def test_model_flops_sum_windowed_and_full_layers():
    m = load_model_preset("gpt-oss-120b")
    full = m.model_copy(update={"sliding_window": None})
    sh = rank_shape(m, 8192, 1)
    per_layer = [layer_flops(m, sh, layer_index=i) for i in (0, 1)]
    saved = 18 * sum(f.forward_flops + f.backward_flops for f in per_layer[1:]) - 18 * sum(
        f.forward_flops + f.backward_flops for f in per_layer[:1])
    assert model_flops(full, 8192, 1, causal=True) - model_flops(m, 8192, 1, causal=True) == pytest.approx(
        saved, rel=1e-9)


def test_deepseek_mtp_module_parameters_by_hand():
    """One MTP module of DeepSeek-V3 = enorm + hnorm (2 x 7168) + eh_proj (14336 x 7168) + one MoE layer; the
    model card's 14B adds the shared embedding and head (2 x 129280 x 7168 = 1.85B): 11.61 + 1.85 = 13.46B, and
    671 + 13.46 = 684.5, the card's 685B."""
    m = load_model_preset("deepseek-v3")
    c = param_counts(m)
    layer = param_counts(m.model_copy(update={"layers": 4, "mtp_layers": 0}))["total"] - param_counts(
        m.model_copy(update={"layers": 3, "mtp_layers": 0}))["total"]          # one MoE layer
    assert c["mtp"] == 2 * 7168 + 14336 * 7168 + layer
    assert 684e9 < c["total"] + c["mtp"] + 2 * 129280 * 7168 < 685.5e9
    assert 670e9 < c["total"] < 672e9                                         # the 671B exclude it


def test_mtp_layers_sit_at_the_end_of_the_last_stage():
    m = load_model_preset("deepseek-v3")
    rp = resolve_plan(m, {"pp": 16, "ep": 8, "pipeline_layers": [3] + [4] * 14 + [2]}, {"seq_len": 4096}, 128)
    assert rp.stage_layers[-1] == (59, 60, 61) and rp.stage_chunks[-1] == (3,)
    assert m.is_moe_layer(61)


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


BASE = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 4,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000}


def test_hf_sliding_window_and_mtp_import(tmp_path):
    assert load_hf_config(_write(tmp_path, {**BASE, "sliding_window": 4096})).sliding_window == 4096
    assert load_hf_config(_write(tmp_path, {**BASE, "sliding_window": 4096, "use_sliding_window": False})
                          ).sliding_window is None
    types = ["sliding_attention", "full_attention"] * 2
    m = load_hf_config(_write(tmp_path, {**BASE, "sliding_window": 128, "layer_types": types}))
    assert (m.sliding_window, m.sliding_window_pattern) == (128, 2)
    with pytest.raises(UserError, match="periodic"):
        load_hf_config(_write(tmp_path, {**BASE, "sliding_window": 128,
                                         "layer_types": ["sliding_attention", "full_attention", "full_attention",
                                                         "sliding_attention"]}))
    assert load_hf_config(_write(tmp_path, {**BASE, "num_nextn_predict_layers": 1})).mtp_layers == 1


def test_serving_plans_leave_the_mtp_modules_out():
    """MTP modules train with the model; serving runs them only to draft speculative tokens (not modelled), so an
    inference plan holds neither their layers nor their projections."""
    from simulator.plan.params import stage_params

    m = load_model_preset("deepseek-v3")
    par = {"pp": 2, "ep": 8, "pipeline_layers": [31, 30]}
    train = resolve_plan(m, par, {"seq_len": 4096}, 16)
    serve = resolve_plan(m, par, {"seq_len": 4096, "mode": "inference"}, 16)
    assert train.stage_layers[-1][-1] == 61 and serve.stage_layers[-1][-1] == 60
    assert stage_params(train, 1).dense > stage_params(serve, 1).dense


def test_a_window_pattern_without_a_window_is_refused(tmp_path):
    """`sliding_window_pattern` alone would silently change nothing: exit 2 naming the key and the rule."""
    import subprocess
    import sys

    path = tmp_path / "s.yaml"
    path.write_text("system: {profile: dgx_h100, nodes: 1}\nmodel:\n  preset: llama3-8b\n  sliding_window_pattern: 2\n")
    run = subprocess.run([sys.executable, "-m", "simulator", "run", str(path)], capture_output=True, text=True)
    assert run.returncode == 2 and "model.sliding_window_pattern" in run.stderr and "needs sliding_window" in run.stderr
    assert "Traceback" not in run.stderr
