"""`simulator calibrate --trace`: a profile and an efficiency override from a Kineto trace, and every bad trace
exits 2 naming the file and what is wrong (issue 28, item 4)."""

import copy
import gzip
import json

import pytest
import yaml

from simulator.compute import ComputeEfficiency
from simulator.implementation import kineto
from tests.unit.kineto_synthetic import DEVICE, synthetic_trace, write_trace


def run(cli, tmp_path, trace, *extra):
    out = tmp_path / "mine.profile.yaml"
    code, stdout, err = cli("calibrate", "--trace", trace, "--out", out, *extra)
    return code, stdout, err, out


@pytest.mark.parametrize("compress", [False, True])
def test_writes_profile_and_efficiency(cli, tmp_path, compress):
    trace = write_trace(tmp_path / ("t.json.gz" if compress else "t.json"), compress=compress)
    code, stdout, err, out = run(cli, tmp_path, trace, "--system", "h200_x2")
    assert code == 0, err
    profile = yaml.safe_load(out.read_text())
    assert profile["name"] == "mine" and profile["kernels"]["dense_forward"] == 3
    assert profile["host"]["per_kernel_s"] == pytest.approx(10.2e-6 * 13 / 12, rel=1e-3)
    efficiency = yaml.safe_load((tmp_path / "mine.efficiency.yaml").read_text())
    table = ComputeEfficiency(architecture="hopper", **efficiency["hopper"])   # loads as the shipped tables do
    assert 0 < table.peak_fraction["bf16"] < 0.72                           # the toy GEMMs are slow
    assert "h200_sxm" in stdout and "forward" in stdout


def test_default_output_name(cli, tmp_path):
    trace = write_trace(tmp_path / "run1.json.gz", compress=True)
    code, _, err = cli("calibrate", "--trace", trace)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "run1.profile.yaml").read_text())["name"] == "run1"


def _bad(cli, tmp_path, path, *extra):
    code, _, err, _ = run(cli, tmp_path, path, *extra)
    assert code == 2
    assert str(path) in err and "Traceback" not in err
    return err


def test_truncated_json(cli, tmp_path):
    text = json.dumps(synthetic_trace())
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    assert "truncated JSON" in _bad(cli, tmp_path, path)


def test_truncated_gzip(cli, tmp_path):
    data = gzip.compress(json.dumps(synthetic_trace()).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "truncated gzip" in _bad(cli, tmp_path, path)


@pytest.mark.parametrize("doc, words", [
    ([{"ph": "X", "cat": "kernel"}], "JSON array"),
    ({"foo": 1}, "no 'traceEvents'"),
    ({"traceEvents": [{"ph": "X", "cat": "PERF", "name": "x", "ts": 1, "dur": 1}]}, "not a Kineto trace"),
])
def test_not_a_kineto_trace(cli, tmp_path, doc, words):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))
    assert words in _bad(cli, tmp_path, path)


def test_no_kernels(cli, tmp_path):
    doc = synthetic_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "kernel"]
    assert "no GPU kernels" in _bad(cli, tmp_path, write_trace(tmp_path / "cpu.json", doc))


def test_another_gpu_than_the_system(cli, tmp_path):
    h100 = dict(DEVICE, name="NVIDIA H100 80GB HBM3", totalGlobalMem=85_029_158_912)
    err = _bad(cli, tmp_path, write_trace(tmp_path / "h100.json", synthetic_trace(h100)), "--system", "h200_x2")
    assert "NVIDIA H100 80GB HBM3" in err and "h200_sxm" in err


def test_unknown_gpu(cli, tmp_path):
    odd = dict(DEVICE, name="Vendor X9000", numSms=7)
    assert "no GPU profile matches" in _bad(cli, tmp_path, write_trace(tmp_path / "x.json", synthetic_trace(odd)))


def test_bad_event_time_names_the_event(cli, tmp_path):
    doc = copy.deepcopy(synthetic_trace())
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e["cat"] == "kernel")
    doc["traceEvents"][index]["dur"] = "5"
    assert f"traceEvents[{index}].dur" in _bad(cli, tmp_path, write_trace(tmp_path / "s.json", doc))


def test_over_the_size_limit(cli, tmp_path, monkeypatch):
    path = write_trace(tmp_path / "big.json.gz", compress=True)
    monkeypatch.setattr(kineto, "MAX_TRACE_BYTES", 1000)   # the synthetic trace is ~8 KB of JSON
    assert "over 1,000 bytes of JSON" in _bad(cli, tmp_path, path)


def test_trace_with_nccl_flags_is_refused(cli, tmp_path):
    code, _, err = cli("calibrate", "--trace", write_trace(tmp_path / "t.json"), "--ranks", "2")
    assert code == 2 and "--trace reads one profiler trace" in err


def test_nccl_mode_still_needs_its_flags(cli, tmp_path):
    code, _, err = cli("calibrate", "--system", "h200_x2", "--out", tmp_path / "c.yaml")
    assert code == 2 and "--ranks" in err and "MEASUREMENT_FILE" in err


def _scenario(tmp_path, profile):
    path = tmp_path / f"{profile}.yaml"
    path.write_text(yaml.safe_dump({
        "system": {"profile": profile, "nodes": 1, "gpus": 1},
        "model": {"layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn_hidden": 4096, "vocab": 32000},
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 1, "precision": "pure_bf16",
                     "framework": "pytorch"}}))
    return path


def test_another_gpu_than_the_scenario(cli, tmp_path):
    err = _bad(cli, tmp_path, write_trace(tmp_path / "t.json"), "--scenario", _scenario(tmp_path, "dgx_h100"))
    assert "NVIDIA H200" in err and "h100_sxm5" in err


def test_scenario_fits_the_memory_efficiency(cli, tmp_path):
    """With the traced run's scenario the memory efficiency is fitted so that its step less the optimizer equals
    the trace's GPU busy time less the optimizer phase (the toy trace's 117 us is far below the model's step: the
    bisection stops at the upper bound 1), and the optimizer's efficiency to the optimizer kernel's 25 us."""
    code, stdout, err, _ = run(cli, tmp_path, write_trace(tmp_path / "t.json"), "--scenario",
                               _scenario(tmp_path, "h200_x2"))
    assert code == 0, err
    table = yaml.safe_load((tmp_path / "mine.efficiency.yaml").read_text())["hopper"]
    assert table["memory_efficiency"] == pytest.approx(1.0, abs=1e-6) and "memory_efficiency" in stdout
    assert 0 < table["optimizer_efficiency"] <= 1
