"""The shipped scenarios work by name from any folder (issue 27 item 5): `simulator scenarios` lists them, every
command that takes a scenario accepts a name where no such file exists, and `regress` finds its data in the
package."""

import json
import shutil
from pathlib import Path

from simulator.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def test_scenarios_lists_every_shipped_file_with_its_header_line(cli):
    code, out, _ = cli("scenarios")
    assert code == 0
    files = sorted(p.relative_to(SCENARIOS).with_suffix("").as_posix() for p in SCENARIOS.rglob("*.yaml"))
    listed = [line.split()[0] for line in out.splitlines()[:len(files)]]
    assert listed == files and "multimodal/clip_vit_g14_distmm" in listed
    quickstart = next(line for line in out.splitlines() if line.startswith("quickstart "))
    assert "Quick start: GPT-3 175B on 8 DGX A100 (64 GPUs), TP 8 inside each node, PP 8 across nodes." in quickstart
    assert f"{len(files)} shipped scenarios: simulator run NAME" in out
    assert max(len(line) for line in out.splitlines()) < 140  # one line each, long headers cut


def test_scenarios_json_names_descriptions_and_paths(cli):
    code, out, _ = cli("scenarios", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["quickstart"]["scenario_name"] == "quickstart-gpt3-175b"
    assert rows["serve_rtx3090_llama3_8b"]["description"].startswith("Serving Llama-3-8B in bf16 on a two-GPU RTX")
    assert Path(rows["korthikanti_22b"]["path"]).resolve() == SCENARIOS / "korthikanti_22b.yaml"
    assert all(row["description"] and row["scenario_name"] for row in rows.values())


def test_run_finds_a_shipped_scenario_by_name_from_any_folder(cli, tmp_path, monkeypatch):
    code, by_path, _ = cli("run", SCENARIOS / "quickstart.yaml", "--json")
    assert code == 0
    monkeypatch.chdir(tmp_path)  # no scenarios/ here: the README's line and the bare name find the shipped file
    for name in ("quickstart", "quickstart.yaml", "scenarios/quickstart.yaml"):
        code, out, err = cli("run", name, "--json")
        assert (code, err) == (0, "") and out == by_path, name
    code, out, _ = cli("run", "multimodal/clip_vit_g14_distmm")
    assert code == 0 and out.startswith("clip-vit-g14-distmm: clip-vit-g14 (contrastive)")


def test_a_file_that_exists_wins_over_a_shipped_name(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(SCENARIOS / "korthikanti_22b.yaml", tmp_path / "quickstart")
    code, out, _ = cli("run", "quickstart")
    assert code == 0 and out.startswith("scenario korthikanti-22b-sp-selective:")


def test_memory_serve_and_compare_take_names(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("memory", "quickstart", "--json")
    assert code == 0 and json.loads(out)["peak_bytes"] > 0
    code, out, _ = cli("serve", "serve_rtx3090_llama3_8b", "--json")
    assert code == 0 and json.loads(out)["scenario"] == "serve-rtx3090-llama3-8b"
    code, out, _ = cli("compare", "korthikanti_22b", "quickstart")
    assert code == 0 and "korthikanti-22b-sp-selective" in out and "quickstart-gpt3-175b" in out


def test_an_unknown_name_exits_2_with_the_close_names(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", "quikstart")
    assert code == 2 and out == ""
    assert "no file or shipped scenario named 'quikstart'; close names: quickstart" in err
    code, _, err = cli("search", "llama3_70b")
    assert code == 2 and "close names: " in err and "llama3_70b_h100_distopt" in err
    code, _, err = cli("serve", "zzzzzz")
    assert code == 2 and "named 'zzzzzz' (`simulator scenarios` lists them)" in err
    code, _, err = cli("run", "nope/missing.yaml")  # a path, not a name: the loader's own message
    assert code == 2 and "nope/missing.yaml: file not found" in err


def test_regress_defaults_are_the_package_data(cli, tmp_path):
    args = build_parser(["regress"]).parse_args(["regress"])
    assert Path(args.scenarios).resolve() == SCENARIOS
    assert Path(args.goldens).resolve() == ROOT / "tests" / "regression" / "golden"
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(SCENARIOS / "quickstart.yaml", one)
    code, out, _ = cli("regress", "--scenarios", one)  # the default goldens: the shipped quickstart's
    assert code == 0 and out == "1 scenarios, 0 differences\n"
    code, _, err = cli("regress", "--goldens", tmp_path / "absent")
    assert code == 2 and "does not exist; pass --goldens FOLDER" in err
    code, _, err = cli("regress", "--scenarios", tmp_path / "absent")
    assert code == 2 and "does not exist; pass --scenarios FOLDER" in err
