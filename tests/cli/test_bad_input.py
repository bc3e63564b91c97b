"""User mistakes exit with status 2 and one message naming the file, line, key path and rule (no traceback)."""

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.hardware.loader import PROFILE_ROOT

A100_NODE = (PROFILE_ROOT / "nodes" / "dgx_a100_80gb.yaml").read_text()
H100_GPU = (PROFILE_ROOT / "gpus" / "h100_sxm5.yaml").read_text()


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_unknown_profile_lists_the_known_names(capsys):
    code, _, err = run_cli(["hardware", "show", "dgx_a1000"], capsys)
    assert code == 2
    assert "unknown hardware profile 'dgx_a1000'" in err and "dgx_a100_80gb" in err and "h100_sxm5" in err
    assert "Traceback" not in err
    code, _, err = run_cli(["topology", "dgx_h1000"], capsys)
    assert code == 2 and "unknown node profile 'dgx_h1000'; known: a100_pcie_x2_nvlink, dgx_a100_40gb" in err


def test_malformed_yaml_names_file_and_line(tmp_path, capsys):
    text = A100_NODE.replace("  count: 6\n", "  count: [6\n")
    path = write(tmp_path, "broken.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2
    assert err.startswith(f"error: {path}:") and "malformed YAML" in err


def test_misspelled_key_names_the_key_path_and_line(tmp_path, capsys):
    text = A100_NODE.replace("  links_per_gpu:", "  links_per_gup:")
    path = write(tmp_path, "typo.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2
    assert f"{path}:{line_of(text, 'links_per_gup')}: nvswitch.links_per_gup: unknown key" in err


def test_negative_bandwidth_names_the_key(tmp_path, capsys):
    text = A100_NODE.replace("bandwidth: 200 Gb/s", "bandwidth: -200 Gb/s")
    path = write(tmp_path, "neg.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2
    assert f":{line_of(text, '-200 Gb/s')}: nics.bandwidth: Input should be greater than 0" in err


def test_wrong_unit_names_the_key_and_the_dimension(tmp_path, capsys):
    text = A100_NODE.replace("bandwidth: 200 Gb/s", "bandwidth: 200 GiB")
    path = write(tmp_path, "unit.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2
    assert "nics.bandwidth: unknown bandwidth unit 'GiB' in '200 GiB' (that is a bytes unit)" in err


def test_wrong_unit_in_a_gpu_profile(tmp_path, capsys):
    text = H100_GPU.replace("capacity: 81559 MiB", "capacity: 80 GB/s")
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    path = write(gpus, "h100_bad.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2 and "memory.capacity: unknown bytes unit 'GB/s'" in err


def test_inconsistent_peak_is_rejected_with_the_derivation(tmp_path, capsys):
    text = H100_GPU.replace("bf16: 989.4 TFLOP/s", "bf16: 1200 TFLOP/s")
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    path = write(gpus, "h100_peak.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2
    assert "stated bf16 peak 1200.0 TFLOP/s disagrees with the SM-level derivation 132 SMs x 4096 FLOP/clk x " \
           "1830 MHz = 989.4 TFLOP/s" in err


def test_node_naming_an_unknown_gpu(tmp_path, capsys):
    text = A100_NODE.replace("gpu: a100_sxm4_80gb", "gpu: a100_sxm9")
    path = write(tmp_path, "gpu.yaml", text)
    code, _, err = run_cli(["hardware", "show", path], capsys)
    assert code == 2 and f"{path}:{line_of(text, 'a100_sxm9')}: gpu: unknown gpu profile 'a100_sxm9'" in err


def test_scenario_mistakes(tmp_path, capsys):
    path = write(tmp_path, "s.yaml", "system:\n  profle: dgx_h100\n")
    code, _, err = run_cli(["run", path], capsys)
    assert code == 2 and f"{path}:2: system.profle: unknown key" in err
    path = write(tmp_path, "s2.yaml", "system:\n  profile: dgx_h1000\n  nodes: 2\n")
    code, _, err = run_cli(["run", path], capsys)
    assert code == 2 and f"{path}:2: system.profile: unknown node profile 'dgx_h1000'" in err
    path = write(tmp_path, "s3.yaml", "system:\n  profile: dgx_h100\nmodel:\n  preset: llama3-8b\nparallel:\n"
                                      "  tp: 8\n  tensor_parallel: 2\n")
    code, _, err = run_cli(["run", path], capsys)
    assert code == 2 and f"{path}:7: parallel.tensor_parallel: unknown key" in err
    code, _, err = run_cli(["run", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and "missing.yaml: file not found" in err
    path = write(tmp_path, "s4.yaml", "system:\n  profile: rtx3090_x4_pcie\n  nodes: 2\n")
    code, _, err = run_cli(["run", path], capsys)
    assert code == 2 and "2 nodes need a network, but node profile rtx3090_x4_pcie has no NICs" in err


def test_unknown_gpu_in_path_query(capsys):
    code, _, err = run_cli(["topology", "dgx_h100", "--path", "gpu0", "gpu8"], capsys)
    assert code == 2 and "unknown GPU 'gpu8': this system has 8 GPUs" in err
    with pytest.raises(SystemExit) as exc:
        main(["topology", "dgx_h100", "--nodes", "0"])
    assert exc.value.code == 2


@pytest.mark.parametrize("argv", [
    ["run", "--trace", "/nonexistent-folder/t.json"],
    ["run", "--plot", "/nonexistent-folder/p.png"],
    ["topology", "dgx_h100", "--graphml", "/nonexistent-folder/t.graphml"],
    ["sweep", "scenarios/llama3_70b_tp_pp_sweep.yaml", "-o", "/nonexistent-folder/s.csv"],
    ["calibrate", "--system", "h200_x2", "--ranks", "2", "x.txt", "--out", "/nonexistent-folder/c.yaml"],
])
def test_output_into_a_missing_folder_is_refused_before_any_work(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "folder '/nonexistent-folder' does not exist" in capsys.readouterr().err


def test_bad_calibration_file_names_file_line_and_key(tmp_path, capsys):
    path = write(tmp_path, "cal.yaml", "entries:\n  - {link_class: nvlink, protocol: simple, latency_s: 1.0e-6,\n"
                                       "     small_bw_Bps: 1.0e+11, fill_latency_s: 0, bandwidth_Bps: -5}\n")
    code, _, err = run_cli(["collective", "--system", "h200_x2", "--ranks", "2", "--op", "all_reduce", "--bytes",
                            "1MiB", "--calibration", path], capsys)
    assert code == 2
    assert f"{path}:3: entries.0.bandwidth_Bps: Input should be greater than 0" in err
