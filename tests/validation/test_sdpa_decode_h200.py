"""PyTorch SDPA decode by call form on one H200 (simulator/validation/data/h200_sdpa/sdpa_decode.jsonl) against the
serving model's attention op: the constants are what the calibration rows give, every other row validates them
(issue 29: decode median within 5%, max within 15%); the call form is a serving key (exit 2 where it cannot apply)."""

import statistics

import pytest
import yaml

from simulator.cli import main
from simulator.entries.serve import simulate_serving
from simulator.scenario import load_scenario
from simulator.serving.backends import KERNEL_SETS, SDPA_CALLS
from simulator.validation.sdpa_decode import FORMS, fit, measured, predict_s, sdpa_rows


@pytest.fixture(scope="module")
def rows():
    return sdpa_rows()


def test_the_constants_are_the_calibration_rows_fit():
    fitted = fit()
    for form, values in fitted.items():
        kernel = SDPA_CALLS[form]
        assert kernel.kv_read_efficiency == pytest.approx(values["efficiency"], rel=2e-3)
        assert kernel.floor_s == pytest.approx(values["floor_s"], rel=2e-3)
        if "copy_efficiency" in values:
            assert kernel.copy_efficiency == pytest.approx(values["copy_efficiency"], rel=2e-3)
    # 4.45 TB/s and 4.57 TB/s of 4.8: the single GQA call streams the cache; the per-call copy runs at 1.18 TB/s
    assert fitted["gqa_single_call"]["efficiency"] * 4.8e12 == pytest.approx(4.45e12, rel=2e-3)
    assert fitted["repeat_kv"]["copy_efficiency"] * 4.8e12 == pytest.approx(1.18e12, rel=3e-3)


def test_every_row_is_predicted(rows):
    assert len(rows) == 112 and {r.form for r in rows} == set(FORMS)
    assert sum(r.calibration for r in rows) == 16  # 2 rows x 2 shapes x 4 forms


@pytest.mark.parametrize("form", sorted(FORMS))
def test_validation_rows_median_within_5_percent(rows, form):
    errors = [abs(r.error) for r in rows if r.form == form and not r.calibration]
    assert len(errors) == 24
    assert statistics.median(errors) < 0.05


def test_rows_beyond_15_percent(rows):
    """One of 96 validation rows misses 15%: the single GQA call at batch 8 x 1K with 40/8 heads, 10.7 us measured
    against 13.2 us (the floor and the streaming overlap there; the additive model counts both)."""
    outside = [(r.form, r.batch, r.context, r.q_heads, round(r.error, 3)) for r in rows
               if not r.calibration and abs(r.error) > 0.15]
    assert outside == [("gqa_single_call", 8, 1024, 40, 0.234)]


def test_the_folded_model_is_ten_times_the_single_gqa_call_at_batch_1_x_32k():
    """The issue's 9.8x: 40/8 heads, batch 1 x 32K: the folded form's 8 CTAs x 44.5 GB/s give 377 us; the single GQA
    call measured 38.5 us, and its model is 6.9% fast there."""
    row = next(r for r in measured() if r["call_form"] == "gqa_single_call" and r["batch"] == 1
               and r["context"] == 32768 and r["kv_heads"] == 8)
    assert row["median_s"] == pytest.approx(38.5e-6, rel=0.01)
    assert predict_s(row, SDPA_CALLS["folded_gqa"]) / row["median_s"] == pytest.approx(9.87, rel=0.01)
    assert predict_s(row) / row["median_s"] == pytest.approx(0.931, abs=0.002)


def _scenario(**serving) -> dict:
    model = {"name": "small", "layers": 2, "hidden": 5120, "heads": 40, "kv_heads": 8, "head_dim": 128,
             "ffn_hidden": 8192, "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm"}
    return {"name": "sdpa", "system": {"profile": "hgx_h200", "gpus": 1}, "model": model,
            "training": {"mode": "inference", "precision": "bf16"},
            "serving": {"batch": 1, "input_len": 32767, "output_len": 1, "attention": "torch_sdpa", **serving}}


def test_hf_eager_calls_sdpa_once_with_gqa_and_torch_eager_folds():
    """HF eager's DynamicCache decode passes no mask, so SDPA gets enable_gqa (KvCacheImpl concat's source): its
    attention per layer is the single-call model, 5.67 us + 134 MB / 4.45 TB/s = 35.8 us; plain PyTorch
    (benchmarks/device/serve_decode.py) folds the group: 134 MB / (8 x 44.5 GB/s) + 2.68 us = 380 us."""
    assert KERNEL_SETS["hf_eager"].sdpa_call == "gqa_single_call" and KERNEL_SETS["torch_eager"].sdpa_call == "folded_gqa"
    cache = 32768 * 8 * 128 * 4
    hf = simulate_serving(load_scenario(_scenario(kernels="hf_eager", kv_cache_impl="concat")))
    assert hf.decode.breakdown_s["attention"] == pytest.approx(2 * (5.67e-6 + cache / (0.927 * 4.8e12)), rel=1e-9)
    plain = simulate_serving(load_scenario(_scenario(kernels="torch_eager", cuda_graphs=False)))
    assert plain.decode.breakdown_s["attention"] == pytest.approx(2 * (2.68e-6 + cache / (8 * 44.5e9)), rel=1e-9)
    expanded = simulate_serving(load_scenario(_scenario(kernels="torch_eager", attention_call="expanded_cache")))
    assert expanded.decode.breakdown_s["attention"] == pytest.approx(2 * (4.92e-6 + 5 * cache / (0.952 * 4.8e12)),
                                                                     rel=1e-9)


@pytest.mark.parametrize(("serving", "rule"), [
    ({"attention": "flash_decoding", "attention_call": "gqa_single_call"}, "needs attention: torch_sdpa"),
    ({"kernels": "hf_compiled", "kv_cache_impl": "static", "attention_call": "repeat_kv"}, "expand it twice"),
    ({"attention_call": "enable_gqa"}, "gqa_single_call"),
])
def test_bad_attention_call_exits_2(tmp_path, capsys, serving, rule):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(**serving), sort_keys=False))
    assert main(["serve", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "serving.attention_call" in err and rule in err
