"""Scenario loading (extends, model sources, errors with lines), sweeps, compare, schema and output formats."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from simulator import load_scenario, simulate
from simulator.cli import main
from simulator.entries.sweep import plan_sweep, run_sweep
from simulator.errors import UserError
from simulator.scenario.schema import scenario_json_schema

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))

BASE = """\
name: base
system:
  profile: dgx_h100
  nodes: 2
model:
  preset: llama3-8b
parallel:
  tp: 8
  sp: true
training:
  seq_len: 4096
  micro_batch: 1
  global_batch: 16
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_at_least_twelve_commented_scenarios_ship():
    assert len(SCENARIOS) >= 12
    for path in SCENARIOS:
        assert path.read_text().startswith("#"), f"{path.name} has no leading comment"


@pytest.mark.parametrize("path", [p for p in SCENARIOS if "sweep:" not in p.read_text()], ids=lambda p: p.stem)
def test_every_plain_scenario_runs_from_the_cli(path, capsys):
    assert main(["run", str(path)]) == 0
    assert "memory per GPU" in capsys.readouterr().out


def test_dp_is_derived_and_python_api_matches_cli(tmp_path):
    scenario = load_scenario(write(tmp_path, "a.yaml", BASE))
    assert scenario.gpus == 16 and scenario.plan.dp == 2 and scenario.model.name == "llama3-8b"
    result = simulate(scenario)
    data = result.to_dict()
    assert set(data["memory"]) >= {"peak_bytes", "stages"}
    stage = data["memory"]["stages"][0]
    assert set(stage) >= {"stage", "weights", "gradients", "main_params", "optimizer", "activations", "other", "total"}
    assert stage["total"] == pytest.approx(sum(stage[k] for k in ("weights", "gradients", "main_params", "optimizer",
                                                                  "activations", "other")))
    frame = result.to_frame()
    assert len(frame) == 1 and frame.loc[0, "memory.peak_bytes"] == data["memory"]["peak_bytes"]


def test_extends_merges_and_reports_the_right_file(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    child = write(tmp_path, "child.yaml", "extends: base.yaml\nname: child\nparallel:\n  tp: 4\n")
    scenario = load_scenario(child)
    assert scenario.name == "child" and scenario.parallel.tp == 4 and scenario.parallel.sp  # sp kept from base
    assert scenario.plan.dp == 4
    bad = write(tmp_path, "bad.yaml", "extends: base.yaml\nparallel:\n  tp: 3\n")
    with pytest.raises(UserError) as exc:
        load_scenario(bad)
    # dp is derived (not written), so the world-size error points at the parallel: section of the child
    assert exc.value.file == str(bad) and exc.value.line == 2 and exc.value.key_path.startswith("parallel")
    missing = write(tmp_path, "missing.yaml", "extends: nowhere.yaml\n")
    with pytest.raises(UserError, match="extends names 'nowhere.yaml', which does not exist"):
        load_scenario(missing)


def test_inline_fields_override_a_preset(tmp_path):
    text = BASE.replace("  preset: llama3-8b\n", "  preset: llama3-8b\n  layers: 16\n")
    assert load_scenario(write(tmp_path, "o.yaml", text)).model.layers == 16


def test_hf_config_path_is_relative_to_the_scenario(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
              "num_key_value_heads": 4, "intermediate_size": 4096, "vocab_size": 32000, "tie_word_embeddings": False}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    text = BASE.replace("  preset: llama3-8b\n", "  hf_config: cfg/config.json\n")
    model = load_scenario(write(tmp_path, "hf.yaml", text)).model
    assert (model.layers, model.hidden, model.kv_heads) == (4, 1024, 4)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (("  tp: 8", "  tp: 8\n  tpp: 2"), ":9: parallel.tpp: unknown key"),                     # misspelled key
        (("  seq_len: 4096", "  seq_len: 4k"), ":11: training.seq_len:"),                     # wrong value
        (("  tp: 8", "  tp: 3"), "parallel"),                                                  # impossible plan
        (("  preset: llama3-8b", "  preset: llama9"), ":6: model.preset: unknown model preset 'llama9'"),
        (("  nodes: 2", "  nodes: two"), ":4: system.nodes:"),
    ],
)
def test_scenario_mistakes_exit_2_with_the_key(tmp_path, capsys, edit, fragment):
    path = write(tmp_path, "m.yaml", BASE.replace(*edit))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and str(path) in err and "Traceback" not in err


def test_sweep_expands_product_and_zip_and_keeps_failures_as_rows(tmp_path):
    text = BASE + "sweep:\n  parallel.tp: [2, 3, 8]\n  parallel.pp: [1, 2]\nzip:\n  training.micro_batch: [1, 2]\n" \
                  "  training.global_batch: [16, 32]\n"
    plan = plan_sweep(write(tmp_path, "s.yaml", text))
    assert len(plan.points) == 3 * 2 * 2
    assert plan.points[-1] == {"parallel.tp": 8, "parallel.pp": 2, "training.micro_batch": 2,
                               "training.global_batch": 32}
    rows = run_sweep(plan, processes=1)
    bad = [r for r in rows if r["parallel.tp"] == 3]
    assert bad and all(r["status"] == "invalid" and "tp" in r["reason"] for r in bad)
    good = [r for r in rows if r["status"] == "ok"]
    assert good and all(r["memory.peak_bytes"] > 0 for r in good)


def test_sweep_cli_writes_one_csv_row_per_plan(tmp_path, capsys):
    text = BASE + "sweep:\n  parallel.tp: [1, 2, 4, 8]\n  training.micro_batch: [1, 2]\n"
    out = tmp_path / "r.csv"
    assert main(["sweep", str(write(tmp_path, "s.yaml", text)), "-o", str(out), "--no-progress"]) == 0
    frame = pd.read_csv(out)
    assert len(frame) == 8 and set(frame["status"]) <= {"ok", "oom", "invalid"}
    assert "8 plans" in capsys.readouterr().out


def test_sweep_mistakes_are_located(tmp_path):
    with pytest.raises(UserError, match="zip lists must have one length"):
        plan_sweep(write(tmp_path, "z.yaml", BASE + "zip:\n  parallel.tp: [1, 2]\n  parallel.pp: [1]\n"))
    with pytest.raises(UserError) as exc:
        plan_sweep(write(tmp_path, "k.yaml", BASE + "sweep:\n  tp: [1, 2]\n"))
    assert exc.value.key_path == "sweep.tp" and exc.value.line == 15


def test_compare_prints_deltas(tmp_path, capsys):
    a = write(tmp_path, "a.yaml", BASE)
    b = write(tmp_path, "b.yaml", BASE.replace("micro_batch: 1", "micro_batch: 2"))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "memory.peak_bytes" in out and "%" in out


def test_run_output_formats(capsys):
    quick = str(ROOT / "scenarios" / "quickstart.yaml")
    assert main(["run", quick, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memory"]["peak_bytes"] > 0
    assert main(["run", quick, "--csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert frame.loc[0, "memory.peak_bytes"] == data["memory"]["peak_bytes"]
    assert main(["run", quick, "--markdown"]) == 0
    assert "|---:|" in capsys.readouterr().out


def test_schema_covers_every_section(capsys):
    schema = scenario_json_schema()
    assert set(schema["properties"]) >= {"system", "model", "parallel", "training", "sweep", "zip", "extends"}
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "simulator scenario"
    # the loader's resolved profile is not a key users write: editors must not offer training.implementation
    assert "implementation" not in schema["$defs"]["TrainingConfig"]["properties"]
    assert "implementation" in schema["properties"]


def test_training_implementation_is_refused_with_its_place(tmp_path):
    text = BASE.replace("training:\n", "training:\n  implementation: {name: mine}\n", 1)
    assert "  implementation: {name: mine}" in text
    with pytest.raises(UserError) as e:
        load_scenario(write(tmp_path, "impl.yaml", text))
    assert e.value.key_path == "training.implementation" and e.value.line == text.splitlines().index(
        "  implementation: {name: mine}") + 1
    assert "top-level `implementation:` section" in str(e.value)


def test_plots_are_written(tmp_path, capsys):
    quick = str(ROOT / "scenarios" / "quickstart.yaml")
    assert main(["run", quick, "--plot", str(tmp_path / "m.png")]) == 0
    assert (tmp_path / "m.png").stat().st_size > 10_000
    text = BASE + "sweep:\n  parallel.tp: [2, 4, 8]\n  training.micro_batch: [1, 2]\n"
    out = tmp_path / "r.csv"
    assert main(["sweep", str(write(tmp_path, "s.yaml", text)), "-o", str(out), "--no-progress",
                 "--plot", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").stat().st_size > 10_000
    assert main(["sweep", str(tmp_path / "s.yaml"), "-o", str(out), "--no-progress", "--plot", str(tmp_path / "x.png"),
                 "--value", "nope"]) == 2
    assert "--value 'nope' is not a column" in capsys.readouterr().err


def test_system_nvls_false_turns_nvls_off(tmp_path):
    text = BASE.replace("  nodes: 2\n", "  nodes: 1\n").replace("global_batch: 16", "global_batch: 8")
    on = simulate(load_scenario(write(tmp_path, "on.yaml", text.replace("  tp: 8\n  sp: true\n", "  tp: 8\n"))))
    off_text = text.replace("  nodes: 1\n", "  nodes: 1\n  nvls: false\n").replace("  tp: 8\n  sp: true\n", "  tp: 8\n")
    off = simulate(load_scenario(write(tmp_path, "off.yaml", off_text)))
    algorithms = lambda r: {c.algorithm for c in r.step.comm if c.dim == "tp"}  # noqa: E731
    assert any(a.startswith("nvls") for a in algorithms(on))
    assert not any(a.startswith("nvls") for a in algorithms(off))
    assert off.step.step_s > on.step.step_s
    with pytest.raises(UserError, match="has no NVLS-capable NVSwitch"):
        load_scenario(write(tmp_path, "a100.yaml", text.replace("dgx_h100", "dgx_a100_80gb")
                            .replace("  nodes: 1\n", "  nodes: 1\n  nvls: true\n")))


def test_system_calibration_changes_the_timed_collectives(tmp_path):
    """system.calibration (a path relative to the scenario) feeds the fitted link parameters to every collective."""
    cal = ROOT / "hardware_profiles" / "calibration" / "h200_x2.yaml"
    base = ("system:\n  profile: h200_x2\n  nvls: false\n{extra}model: {{preset: llama3-8b}}\nparallel: {{dp: 2}}\n"
            "training: {{seq_len: 4096, micro_batch: 1, global_batch: 2}}\n")
    plain = simulate(load_scenario(write(tmp_path, "plain.yaml", base.format(extra=""))))
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "h200.yaml").write_text(cal.read_text())
    calibrated = simulate(load_scenario(write(tmp_path, "cal.yaml",
                                              base.format(extra="  calibration: cal/h200.yaml\n"))))
    dp = lambda r: next(c for c in r.step.comm if c.dim == "dp")  # noqa: E731
    assert dp(calibrated).call_s != pytest.approx(dp(plain).call_s, rel=1e-3)
    with pytest.raises(UserError, match="calibration file .* does not exist"):
        load_scenario(write(tmp_path, "missing.yaml", base.format(extra="  calibration: nope.yaml\n")))
