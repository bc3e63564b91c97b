"""Issue 27 item 2: unreadable files get one plain sentence; long values are cut in messages."""
from pathlib import Path

import pytest

from simulator.errors import MAX_MESSAGE_CHARS, UserError, cut
from simulator.scenario import load_scenario
from simulator.yamlio import read_yaml

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"name: caf\xe9\n"])
def test_non_utf8_file_is_one_plain_sentence(tmp_path, data):
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    with pytest.raises(UserError) as err:
        read_yaml(path)
    assert "not a UTF-8 YAML file" in str(err.value)
    assert "Error" not in str(err.value)  # no Python exception class


def test_long_value_is_cut(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(QUICKSTART.read_text().replace("preset: gpt3-175b", "preset: " + "q" * 500_000))
    with pytest.raises(UserError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "model.preset" in text and "characters cut" in text
    assert len(text) < MAX_MESSAGE_CHARS + 200


def test_cut_keeps_short_text():
    assert cut("short") == "short"
    assert len(cut("x" * 10_000)) < MAX_MESSAGE_CHARS + 60


def test_json_breakdown_noise_is_zero(capsys):
    from simulator.cli.output import print_json
    print_json({"plans": [{"step_s": 1.06, "breakdown_s": {"bubble": 4.16e-17, "compute": 0.75, "tp": 2e-12}}]})
    import json
    plan = json.loads(capsys.readouterr().out)["plans"][0]
    assert plan["breakdown_s"] == {"bubble": 0.0, "compute": 0.75, "tp": 2e-12}
