"""Issue #17: messages that misled now name the file, line, key and rule; exit 1 is kept for our bugs."""

from pathlib import Path

import pytest

from simulator.hardware.loader import PROFILE_ROOT

ROOT = Path(__file__).resolve().parents[2]
SMALL = ("system:\n  profile: dgx_h100\n  nodes: 1\nmodel:\n  preset: llama3-8b\nparallel:\n  tp: 8\n"
         "training:\n  seq_len: 2048\n  micro_batch: 1\n  global_batch: 8\n")


def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_custom_profile_resolves_against_the_scenario_folder(cli, tmp_path, monkeypatch):
    write(tmp_path, "nodes/mynode.yaml", (PROFILE_ROOT / "nodes" / "dgx_h100.yaml").read_text())
    path = write(tmp_path, "s.yaml", SMALL.replace("profile: dgx_h100", "profile: nodes/mynode.yaml"))
    monkeypatch.chdir(ROOT)  # not the scenario's folder
    code, out, _ = cli("run", path)
    assert code == 0 and "dgx_h100" in out
    missing = write(tmp_path, "m.yaml", SMALL.replace("profile: dgx_h100", "profile: mynode.yaml"))
    code, _, err = cli("run", missing)
    assert code == 2
    assert (f"error: {missing}:2: system.profile: node profile file '{tmp_path / 'mynode.yaml'}' does not exist "
            "(a path is relative to the scenario that names it)") in err


def test_extends_a_folder(cli, tmp_path):
    path = write(tmp_path, "e.yaml", "extends: .\n" + SMALL)
    code, _, err = cli("run", path)
    assert code == 2
    assert f"{path}:1: extends: extends names '.', which is a folder ({tmp_path}); it must name a scenario file" in err


def test_duplicate_key_names_both_lines(cli, tmp_path):
    path = write(tmp_path, "d.yaml", SMALL.replace("  tp: 8\n", "  tp: 8\n  pp: 1\n  tp: 4\n"))
    code, _, err = cli("run", path)
    assert code == 2
    assert (f"{path}:9: parallel.tp: duplicate key 'tp': first on line 7, again on line 9 (YAML would silently keep "
            "the last; keep one)") in err


def test_boolean_is_not_a_number(cli, tmp_path):
    path = write(tmp_path, "b.yaml", SMALL.replace("tp: 8", "tp: true"))
    code, _, err = cli("run", path)
    assert code == 2 and f"{path}:7: parallel.tp: expected a number, got true" in err


def test_hardware_show_of_a_node_file_with_a_typo(cli, tmp_path):
    text = (PROFILE_ROOT / "nodes" / "dgx_h100.yaml").read_text().replace("\ngpus:", "\ngpuz:")
    path = write(tmp_path, "typo.yaml", text)
    code, _, err = cli("hardware", "show", path)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("gpuz:"))
    assert code == 2 and f"{path}:{line}: gpuz: unknown key" in err and "gpus: required key is missing" in err
    assert "memory" not in err  # not read as a GPU profile


def test_bytes_with_two_colons(cli):
    code, _, err = cli("collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks", 8, "--bytes",
                       "1KiB:2KiB:3KiB")
    assert code == 2
    assert "--bytes range '1KiB:2KiB:3KiB' must be START:END (doubling from START), e.g. 1KiB:4GiB" in err


def test_an_internal_error_exits_1_with_a_report_request(cli, monkeypatch):
    import simulator.cli.run_cmd as run_cmd

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(run_cmd, "simulate", broken)
    code, _, err = cli("run")
    assert code == 1
    assert "internal error: ZeroDivisionError: division by zero" in err
    assert "This is a bug in the simulator, not a mistake in your input. Please report it" in err
    assert "rerun with --debug for the traceback" in err


def test_debug_shows_the_traceback(monkeypatch, capsys):
    import simulator.cli.run_cmd as run_cmd
    from simulator.cli import main

    monkeypatch.setattr(run_cmd, "simulate", lambda scenario: 1 / 0)
    assert main(["run", "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err


def test_timeline_draws_every_lane_to_the_end(tmp_path):
    """Past the bar budget the lanes are merged into busy spans and the title says so; every stage keeps bars to
    the end of the step (the PNG used to stop after 4,000 events, stages 5-15 blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulator import load_scenario, simulate
    from simulator.report.plots import timeline_axes

    scenario = write(tmp_path, "pp.yaml", "system: {profile: dgx_h100, nodes: 16}\nmodel: {preset: llama3-8b}\n"
                     "parallel: {tp: 8, pp: 16}\ntraining: {seq_len: 2048, micro_batch: 1, global_batch: 256}\n")
    result = simulate(load_scenario(scenario))
    figure, ax = plt.subplots()
    note = timeline_axes(ax, result, max_bars=1000)
    events = result.step.events()
    assert note.startswith(f"{len([e for e in events if e.dur_s > 0]):,} bars merged into") and note in ax.get_title()
    ends = {}
    for collection in ax.collections:
        for path in collection.get_paths():
            (_, y0), (x1, _) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            row = round(y0 + 0.4)
            ends[row] = max(ends.get(row, 0.0), x1)
    compute_rows = [i for i, label in enumerate(ax.get_yticklabels()) if label.get_text().endswith("compute")]
    assert len(compute_rows) == 16
    step_end = max(e.start_s + e.dur_s for e in events if e.stream == "compute")
    for row in compute_rows:
        assert ends[row] == pytest.approx(step_end, rel=0.05)
    plt.close(figure)
    figure, ax = plt.subplots()
    assert timeline_axes(ax, result) == ""  # under the default budget every bar is drawn
    plt.close(figure)


def test_readme_does_not_combine_algo_all_with_json():
    readme = (ROOT / "README.md").read_text()
    assert "[--algo all] [--json]" not in readme
    for line in readme.splitlines():
        if line.startswith("simulator collective") and "--json" in line:
            assert "--algo all" not in line.split("#")[0]


def test_hf_config_with_nan_or_too_large(cli, tmp_path):
    write(tmp_path, "hf/config.json", '{"model_type": "llama", "hidden_size": NaN}')
    path = write(tmp_path, "s.yaml", "system: {profile: dgx_h100}\nmodel: {hf_config: hf}\n")
    code, _, err = cli("run", path)
    assert code == 2 and f"{tmp_path / 'hf' / 'config.json'}: model.hf_config: NaN is not a finite number" in err
    write(tmp_path, "hf/config.json", '{"model_type": "llama", "pad": "' + "x" * (1 << 20) + '"}')
    code, _, err = cli("run", path)
    assert code == 2 and "model.hf_config: file is larger than 1,048,576 bytes" in err
