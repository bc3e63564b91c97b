"""The foundation's commands print real numbers and write real files."""

import networkx as nx

from simulator.cli import main


def test_hardware_list_and_show(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    assert "dgx_a100_80gb" in out and "rtx3090" in out
    assert main(["hardware", "show", "a100_sxm4_80gb"]) == 0
    out = capsys.readouterr().out
    assert "108 of 128" in out and "311.9" in out and "bf16" in out
    assert main(["hardware", "show", "dgx_a100_80gb"]) == 0
    out = capsys.readouterr().out
    assert "6x gen 2" in out and "NUMA 3: GPUs [0, 1] NICs [0, 1]" in out


def test_topology_summary_path_draw_and_graphml(tmp_path, capsys):
    png, graphml = tmp_path / "t.png", tmp_path / "t.graphml"
    assert main(["topology", "dgx_a100_80gb", "--nodes", "2", "--path", "gpu0", "gpu9", "--draw", str(png),
                 "--graphml", str(graphml)]) == 0
    out = capsys.readouterr().out
    assert "16 GPUs" in out and "bottleneck 25.00 GB/s" in out and "n0.nic0" in out
    assert png.stat().st_size > 10_000
    graph = nx.read_graphml(graphml)
    assert graph.number_of_nodes() == 85 and graph.nodes["n1.gpu3"]["kind"] == "gpu"


def test_topology_path_reports_parallel_routes(capsys):
    assert main(["topology", "dgx_a100_80gb", "--path", "gpu0", "gpu1"]) == 0
    out = capsys.readouterr().out
    assert "6 equally good routes; max-flow over all of them 300.0 GB/s" in out


def test_run_without_argument_uses_the_quickstart(capsys):
    assert main(["run"]) == 0
    assert "quickstart" in capsys.readouterr().out


def test_validate_prints_tables_and_passes(capsys):
    assert main(["validate", "memory", "collectives"]) == 0
    out = capsys.readouterr().out
    assert "[memory]" in out and "[collectives]" in out and "2 passed, 0 failed" in out
    assert "DGX H100 8 ranks NVLS" in out


def test_validate_json_and_jobs_print_what_one_process_prints(capsys):
    """--json writes every table's verdict as a JSON true/false (the collectives gate was a numpy bool, which
    json refused: an internal error); two worker processes print what one does, in the order asked."""
    import json

    assert main(["validate", "collectives", "memory", "--json", "--jobs", "1"]) == 0
    one = capsys.readouterr().out
    assert json.loads(one)["reports"]["collectives"]["passed"] is True
    assert list(json.loads(one)["reports"]) == ["collectives", "memory"]
    assert main(["validate", "collectives", "memory", "--json", "--jobs", "2"]) == 0
    assert capsys.readouterr().out == one
    assert main(["validate", "memory", "--jobs", "0"]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err


def test_validate_unknown_table_is_a_user_error(capsys):
    assert main(["validate", "nope"]) == 2
    assert "unknown validation table(s) ['nope']" in capsys.readouterr().err


def test_help_lists_every_command(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("run", "memory", "sweep", "compare", "collective", "calibrate", "moe", "hardware", "topology",
                    "validate", "regress", "schema", "measure", "scenarios"):
        assert command in out
