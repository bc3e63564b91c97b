"""Issue #12: every --algo the docs name runs through the CLI for each operation that has it; forcing one the
operation lacks, or one the hardware cannot run, is a user error (exit 2)."""

import json

import pytest

from simulator.collectives.model import ALGORITHMS, OPS

#: (op, algorithm) -> a placement (system, ranks, gpus per node) where the model can run it
WHERE = {"nvls": ("dgx_h100", 8, 8), "nvls_tree": ("dgx_h100", 16, 8), "hierarchical": ("dgx_h100", 16, 8),
         "pat": ("dgx_h100", 4, 1), "one_shot": ("dgx_h100", 8, 8), "two_shot": ("dgx_h100", 8, 8)}
DOCUMENTED = ("auto", "ring", "tree", "nvls", "nvls_tree", "hierarchical", "direct", "pat", "one_shot", "two_shot",
              "all")
CASES = [(op, algo) for op in OPS for algo in ALGORITHMS[op]]


def collective(cli, system, ranks, per_node, op, *extra):
    return cli("collective", "--system", system, "--op", op, "--ranks", ranks, "--gpus-per-node", per_node,
               "--bytes", "1MiB,4GiB", *extra)


def test_the_documented_algorithms_are_the_models():
    assert {a for algos in ALGORITHMS.values() for a in algos} | {"auto", "all"} == set(DOCUMENTED)


@pytest.mark.parametrize(("op", "algo"), CASES)
def test_forced_algorithm_runs_and_is_reported(cli, op, algo):
    system, ranks, per_node = WHERE.get(algo, ("dgx_h100", 16, 8))
    code, out, err = collective(cli, system, ranks, per_node, op, "--algo", algo, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["algorithm"] for r in rows] == [algo, algo]
    assert rows[1]["time_us"] > rows[0]["time_us"] > 0 and all(r["busbw_GBps"] > 0 for r in rows)


@pytest.mark.parametrize("op", OPS)
def test_auto_and_all_for_every_operation(cli, op):
    code, out, _ = collective(cli, "dgx_h100", 16, 8, op, "--json")
    assert code == 0 and {r["algorithm"] for r in json.loads(out)} <= set(ALGORITHMS[op])
    code, out, _ = collective(cli, "dgx_h100", 16, 8, op, "--algo", "all")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("op ") and len(lines) >= 3


@pytest.mark.parametrize(("op", "algo"), [(op, a) for op in OPS for a in DOCUMENTED[1:-1] if a not in ALGORITHMS[op]])
def test_an_algorithm_the_operation_lacks(cli, op, algo):
    code, _, err = collective(cli, "dgx_h100", 16, 8, op, "--algo", algo)
    assert code == 2
    assert f"error: algo: {op} has no algorithm '{algo}'; accepted: auto, {', '.join(ALGORITHMS[op])}" in err


@pytest.mark.parametrize(("system", "ranks", "per_node", "op", "algo", "why"), [
    ("dgx_a100_80gb", 8, 8, "all_reduce", "nvls", "NVLS needs NVSwitch gen3+ with NVLink SHARP"),
    ("dgx_h100", 8, 8, "all_reduce", "hierarchical", "cannot run on this group"),
    ("dgx_h100", 16, 8, "all_gather", "pat", "cannot run on this group"),
])
def test_an_algorithm_the_hardware_cannot_run(cli, system, ranks, per_node, op, algo, why):
    code, _, err = collective(cli, system, ranks, per_node, op, "--algo", algo)
    assert code == 2 and f"{op} with algo={algo} proto=auto cannot run on this group" in err and why in err


def test_unknown_algorithm_and_all_with_json(cli):
    code, _, err = collective(cli, "dgx_h100", 8, 8, "all_reduce", "--algo", "rings")
    assert code == 2 and "argument --algo: invalid choice: 'rings'" in err
    code, _, err = collective(cli, "dgx_h100", 8, 8, "all_reduce", "--algo", "all", "--json")
    assert code == 2 and "--algo all is for the table and the plot; --json needs one algorithm or auto" in err
