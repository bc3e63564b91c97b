"""The restart's parts (docs/whole_run.md, "Restart"): NCCL's set-up as a form in the GPU count, worked by hand from
its published points, the sourced constants, and the table's bad values exiting 2 with file, line, key and rule."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from simulator.errors import UserError
from simulator.wholerun import failures
from simulator.wholerun.failure_table import parse_table
from simulator.wholerun.failures import nccl_init_s, restart_cost
from simulator.yamlio import parse_yaml_text


def test_nccl_init_by_hand_from_its_three_published_points():
    # base: 2.46 s at 8 ranks (NVIDIA/nccl#534, NCCL 2.22.3, 8 H100); O(N^2) parts until NCCL 2.28.7 (NVIDIA/nccl#1789):
    # ring building 26 s at 98,304 ranks, transport set-up 11 s at 49,152 ranks. An NCCL before 2.28.7:
    # 8 GPUs: 2.46 + 26 (8 / 98304)^2 + 11 (8 / 49152)^2 = 2.46 + 1.7e-7 + 2.9e-7
    assert nccl_init_s(8, "2.27.7") == pytest.approx(2.46, abs=1e-6)
    # 16,384 GPUs: (16384 / 98304)^2 = 1/36, (16384 / 49152)^2 = 1/9: 2.46 + 0.7222 + 1.2222 = 4.4044 s
    assert nccl_init_s(16384, "2.27.7") == pytest.approx(2.46 + 26 / 36 + 11 / 9, rel=1e-12)
    assert nccl_init_s(16384, "2.22") == pytest.approx(4.4044, abs=1e-4)
    # 98,304 GPUs: 2.46 + 26 + 11 x 2^2 = 72.46 s (transport set-up at 96K is four times its 48K saving)
    assert nccl_init_s(98304, "2.27.7") == pytest.approx(72.46, rel=1e-12)
    # 1024 GPUs: 2.46 + 26 / 96^2 + 11 / 48^2 = 2.46 + 0.00282 + 0.00477 = 2.4676 s
    assert nccl_init_s(1024, "2.27.7") == pytest.approx(2.4676, abs=1e-4)
    # NCCL 2.28.7 and later (the default, 2.28.9) no longer have those loops: the one-node time at every scale
    assert nccl_init_s(98304, "2.28.7") == nccl_init_s(98304) == 2.46
    assert nccl_init_s(98304, "3.0") == 2.46


def _section(nccl_version=None, **parts):
    return SimpleNamespace(nccl_version=nccl_version,
                           **{f"{k}_s": parts.get(k) for k in ("reschedule", "init", "nccl_init", "warmup")})


def test_restart_cost_adds_the_sourced_parts_at_the_jobs_scale():
    none = SimpleNamespace(hot_spares=0, in_job_recovery=False)
    # 16,384 GPUs, 90 s of checkpoint load: 600 (PyTorch's NCCL timeout) + 120 + 2.46 + 90 + 60 = 872.46 s
    cost = restart_cost(_section(), none, 90.0, 16384)
    assert (cost.reschedule_s, cost.init_s, cost.nccl_init_s, cost.load_s, cost.warmup_s) == (
        600.0, 120.0, 2.46, 90.0, 60.0)
    assert cost.total_s == pytest.approx(872.46, rel=1e-12)
    # the same job on NCCL 2.27: + 26 / 36 + 11 / 9 = 874.4044 s
    cost = restart_cost(_section(nccl_version="2.27"), none, 90.0, 16384)
    assert cost.nccl_init_s == pytest.approx(4.4044, abs=1e-4)
    assert cost.total_s == pytest.approx(874.4044, abs=1e-4)
    # an override replaces the form; hot spares drop the reschedule part, in-job recovery the init part
    spare = SimpleNamespace(hot_spares=2, in_job_recovery=True)
    cost = restart_cost(_section(nccl_init=30.0), spare, 0.0, 16384)
    assert (cost.reschedule_s, cost.init_s, cost.nccl_init_s, cost.total_s) == (0.0, 0.0, 30.0, 90.0)


TABLE = """\
rates_per_day:
  gpu: {value: 0.0, source: s}
  host: {value: 6.5e-3, source: s}
  nic: {value: 0.0, source: s}
  switch: {value: 0.0, source: s}
  software: {value: 0.0, source: s}
restart_s:
  reschedule: {value: 600.0, source: s}
  init: {value: 120.0, source: s}
  nccl_init:
    default_nccl_version: "2.28.9"
    base: {seconds: 2.46, gpus: 8, source: s}
    quadratic:
      - {seconds: 26.0, gpus: 98304, until_nccl: "2.28.7", source: s}
  warmup: {value: 60.0, source: s}
"""


def test_the_shipped_table_passes_its_checks():
    failures.table.cache_clear()
    assert failures.table().restart_s.nccl_init.base.gpus == 8
    assert parse_table(parse_yaml_text(TABLE, "t.yaml")).restart_s.nccl_init.quadratic[0].until_nccl == "2.28.7"


@pytest.mark.parametrize(("old", "new", "line", "key", "rule"), [
    ("host: {value: 6.5e-3,", "host: {value: -1.0,", 3, "rates_per_day.host.value", ">= 0"),
    ("warmup: {value: 60.0,", "warmup: {value: x,", 15, "restart_s.warmup.value", ">= 0"),
    ("base: {seconds: 2.46, gpus: 8,", "base: {seconds: 2.46, gpus: 0,", 12, "restart_s.nccl_init.base.gpus", ">= 1"),
    ("seconds: 26.0,", "seconds: -26.0,", 14, "restart_s.nccl_init.quadratic.0.seconds", ">= 0"),
    ('until_nccl: "2.28.7"', "until_nccl: 2.28", 14, "restart_s.nccl_init.quadratic.0.until_nccl", "quoted"),
    ('default_nccl_version: "2.28.9"', 'default_nccl_version: "latest"', 11,
     "restart_s.nccl_init.default_nccl_version", "MAJOR.MINOR"),
    ("    quadratic:\n      - {seconds: 26.0, gpus: 98304, until_nccl: \"2.28.7\", source: s}\n", "    quadratic: 3\n", 13,
     "restart_s.nccl_init.quadratic", "list"),
    # the schema's further rules: a YAML boolean is no number, a GPU count is whole, every number has its source,
    # a misspelt key is refused rather than ignored
    ("nic: {value: 0.0,", "nic: {value: true,", 4, "rates_per_day.nic.value", ">= 0"),
    ("gpus: 98304,", "gpus: 98304.5,", 14, "restart_s.nccl_init.quadratic.0.gpus", ">= 1"),
    ("init: {value: 120.0, source: s}", "init: {value: 120.0}", 9, "restart_s.init.source", "required"),
    ("init: {value: 120.0, source: s}", "init: {value: 120.0, source: \"\"}", 9, "restart_s.init.source",
     "non-empty"),
    ("warmup: {value: 60.0,", "warmup: {valeu: 60.0,", 15, "restart_s.warmup.valeu", "unknown key"),
])
def test_bad_table_values_name_file_line_key_and_rule(old, new, line, key, rule):
    assert old in TABLE
    with pytest.raises(UserError) as err:
        parse_table(parse_yaml_text(TABLE.replace(old, new), "t.yaml"))
    assert (err.value.file, err.value.line, err.value.key_path) == ("t.yaml", line, key)
    assert rule in err.value.message


def test_every_bad_entry_of_the_table_is_listed_with_its_line():
    text = TABLE.replace("host: {value: 6.5e-3,", "host: {value: -1.0,").replace("gpus: 8,", "gpus: 0,")
    with pytest.raises(UserError) as err:
        parse_table(parse_yaml_text(text, "t.yaml"))
    assert (err.value.line, err.value.key_path) == (3, "rates_per_day.host.value")
    assert "must be a finite number >= 0, got -1.0" in err.value.message
    assert "t.yaml:12: restart_s.nccl_init.base.gpus: must be a whole number of GPUs >= 1, got 0" in err.value.message


def test_a_bad_shipped_table_exits_2_through_the_cli(tmp_path, monkeypatch, capsys):
    from simulator.cli import main

    bad = tmp_path / "failure_rates.yaml"
    bad.write_text(failures.TABLE.read_text().replace("value: 120.0", "value: -120.0"))
    monkeypatch.setattr(failures, "TABLE", bad)
    failures.table.cache_clear()
    try:
        assert main(["run", "scenarios/llama3_70b_run_h200.yaml"]) == 2
    finally:
        failures.table.cache_clear()
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "restart_s.init.value" in err and ">= 0" in err


def test_the_b200_row_is_the_form_at_8_gpus_against_the_issues_root_rank():
    from simulator.validation.whole_run import whole_run_rows

    row = next(r for r in whole_run_rows() if r.id == "nccl_init_b200_8")
    # published: rank 0's Init timings total 55.17 s less its kernel loading 52.33 s = 2.84 s (NVIDIA/nccl#1646)
    assert row.published == pytest.approx(55.17 - 52.33)
    # model: the form at 8 GPUs, 2.46 s (no O(N^2) part at one node in any release); 2.46 / 2.84 - 1 = -13.4%,
    # inside issue 31's 15% and scored
    assert row.predicted == nccl_init_s(8) == 2.46
    assert row.error == pytest.approx(-0.1338, abs=1e-4)
    assert row.known_miss is None and row.within


def test_a_bad_nccl_version_in_the_run_section_exits_2(tmp_path, capsys):
    from simulator.cli import main

    text = Path("scenarios/llama3_70b_run_h200.yaml").read_text(encoding="utf-8")
    base = Path("scenarios/llama3_70b_h100_distopt.yaml").resolve()
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("extends: llama3_70b_h100_distopt.yaml", f"extends: {base}")
                    + "  restart:\n    nccl_version: latest\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "run.restart.nccl_version" in err and "pattern" in err
