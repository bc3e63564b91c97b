"""Issue #17: inputs that used to traceback or hang now exit 2 before any work, in bounded time and memory."""

import json

from simulator.cli.args import PLOT_FORMATS
from simulator.limits import MAX_GPUS, MAX_TOPOLOGY_NODES, MAX_YAML_BYTES, MAX_YAML_NODES

QUICKSTART = "scenarios/quickstart.yaml"
SMALL = ("system:\n  profile: dgx_h100\n  nodes: 1\nmodel:\n  preset: llama3-8b\nparallel:\n  tp: 8\n"
         "training:\n  seq_len: 2048\n  micro_batch: 1\n  global_batch: 8\n")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---- the five tracebacks -------------------------------------------------------------------------------------

def test_run_plot_with_an_unknown_format_fails_before_the_work(cli, tmp_path):
    code, out, err = cli("run", QUICKSTART, "--plot", tmp_path / "step.xyz")
    assert code == 2 and out == ""
    assert "argument --plot: cannot draw" in err and "the extension must be one of avif, eps" in err
    assert "(got 'xyz')" in err


def test_run_trace_into_a_folder(cli, tmp_path):
    code, out, err = cli("run", QUICKSTART, "--trace", tmp_path)
    assert code == 2 and out == ""
    assert f"argument --trace: cannot write '{tmp_path}': it is a folder, not a file" in err


def test_collective_plot_with_an_unknown_format(cli, tmp_path):
    code, out, err = cli("collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks", 8, "--bytes",
                         "1MiB", "--plot", tmp_path / "f.xyz")
    assert code == 2 and out == "" and "cannot draw" in err


def test_moe_negative_seed(cli):
    code, _, err = cli("moe", "--system", "hgx_h800", "--nodes", 2, "--ep", 16, "--tokens", 128, "--hidden", 7168,
                       "--top-k", 8, "--seed", -1)
    assert code == 2 and "argument --seed: expected a non-negative integer (at least 0), got -1" in err


def test_infinite_oversubscription_is_located(cli, tmp_path):
    text = SMALL.replace("  nodes: 1\n", "  nodes: 2\n  fabric:\n    leaf_ports: 64\n    switch_latency: 130 ns\n"
                                          "    oversubscription: .inf\n")
    path = write(tmp_path, "inf.yaml", text)
    code, _, err = cli("run", path)
    assert code == 2
    assert f"error: {path}:7: system.fabric.oversubscription: .inf is not a finite number" in err


def test_plot_formats_are_matplotlibs():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    assert set(PLOT_FORMATS) == set(figure.canvas.get_supported_filetypes())
    plt.close(figure)


# ---- the six hangs and memory blow-ups (a fresh process under 1 GiB; times: benchmarks/bench_hostile.py) --

def test_yaml_alias_bomb_is_refused_before_expanding(bounded, tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        previous = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    code, _, err = bounded("run", path)
    assert code == 2
    assert f"more than {MAX_YAML_NODES:,} values with every alias expanded (an alias bomb?)" in err


def test_huge_global_batch_is_refused(bounded, tmp_path):
    path = write(tmp_path, "gb.yaml", SMALL.replace("global_batch: 8", "global_batch: 64000000"))
    code, _, err = bounded("run", path)
    assert code == 2
    assert (f"{path}:11: training.global_batch: global_batch 64,000,000 / (micro_batch 1 x dp 1) = 64,000,000 "
            "micro-batches per step; x pp 1 x vpp 1 x 2 passes = 128,000,000 pipeline operations, more than the "
            "1,048,576 the timeline replays") in err


def test_topology_of_100000_nodes(bounded):
    code, _, err = bounded("topology", "dgx_h100", "--nodes", 100000)
    assert code == 2
    assert f"argument --nodes: expected a node count (at least 1, at most {MAX_TOPOLOGY_NODES}), got 100,000" in err


def test_collective_of_a_billion_ranks(bounded):
    code, _, err = bounded("collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks", 10**9,
                           "--bytes", "1GiB")
    assert code == 2
    assert f"expected a rank count (at least 2, at most {MAX_GPUS:,}), got 1,000,000,000" in err


def test_sweep_of_a_billion_plans(bounded, tmp_path):
    axis = "[" + ", ".join(str(v) for v in range(1, 33)) + "]"
    sweep = "".join(f"  {k}: {axis}\n" for k in ("parallel.tp", "parallel.pp", "parallel.cp", "parallel.vpp",
                                                  "training.micro_batch", "training.seq_len"))
    path = write(tmp_path, "big.yaml", SMALL + "sweep:\n" + sweep)
    code, _, err = bounded("sweep", path, "-o", tmp_path / "out.csv")
    assert code == 2
    assert f"{path}:12: sweep: 32 x 32 x 32 x 32 x 32 x 32 = 1,073,741,824 plans, more than --max-plans 1,000,000" in err
    assert not (tmp_path / "out.csv").exists()


def test_six_megabyte_yaml(bounded, tmp_path):
    path = write(tmp_path, "wide.yaml", SMALL + "".join(f"key{i}: {i}\n" for i in range(200_000)))
    code, _, err = bounded("run", path)
    assert code == 2 and f"YAML inputs are limited to {MAX_YAML_BYTES:,} bytes" in err


def test_yaml_just_under_the_size_limit_is_read_and_refused(bounded, tmp_path):
    """Under 1 MiB and 100,000 values, 45,000 keys are read and rejected as unknown (how fast: bench_hostile.py)."""
    body = "".join(f"k{i}: {i}\n" for i in range(45_000))
    assert len(body) < MAX_YAML_BYTES
    code, _, err = bounded("run", write(tmp_path, "many.yaml", SMALL + body))
    assert code == 2 and ": k0: unknown key (accepted: name, description, system" in err


def test_json_output_is_strict(cli):
    code, out, _ = cli("collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks", 8, "--bytes",
                       "1KiB:1GiB", "--json")
    assert code == 0

    def refuse(constant):
        raise AssertionError(f"non-JSON constant {constant}")

    rows = json.loads(out, parse_constant=refuse)
    assert len(rows) == 21 and all(r["busbw_GBps"] > 0 for r in rows)


def test_moe_sizes_are_bounded(bounded):
    """Found while hardening: 10^9 experts took 16 GB, and a seeded routing's cost grows as tokens x ep x experts."""
    base = ("moe", "--system", "hgx_h800", "--nodes", 2, "--ep", 16, "--hidden", 7168, "--top-k", 8)
    code, _, err = bounded(*base, "--tokens", 4096, "--experts", 10**9)
    assert code == 2 and "error: experts: 1,000,000,000 experts; the simulator models at most 4,096" in err
    code, _, err = bounded(*base, "--tokens", 65536, "--experts", 256, "--seed", 1)
    assert code == 2
    assert ("seed: a seeded routing draws 65,536 tokens x EP 16 x 256 experts = 268,435,456 scores, more than "
            "67,108,864") in err


def test_collective_group_spanning_too_many_nodes(bounded):
    code, _, err = bounded("collective", "--system", "dgx_h100", "--op", "all_to_all", "--ranks", 131072,
                           "--gpus-per-node", 1, "--bytes", "1GiB")
    assert code == 2 and "--ranks 131072 at 1 per node span 131,072 nodes; a group spans at most 16,384" in err
