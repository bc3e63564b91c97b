"""Issue 27 item 6: what the screen says matches what the run does (GB200 TP 16's algorithms, the serve headline's
static batch vs the curve's steady state)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gb200_tp16_prints_what_the_readme_says(cli):
    """TP 16 with sequence parallelism in an NVL72 rack: 256 MiB all-gathers and reduce-scatters. The collectives
    model (NCCL's tuner) rates NVLS for them at B x 16/17 x 0.74 x (15/16)^2 (docs/collectives.md) below the ring, so
    the run prints ring/simple on NVLink; the README says so and no longer promises NVLS for them."""
    code, out, _ = cli("run", ROOT / "scenarios" / "llama3_405b_gb200_nvl72.yaml")
    assert code == 0
    tp = [line.split() for line in out.splitlines() if line.startswith("tp ")]
    assert {row[1] for row in tp} == {"all_gather", "reduce_scatter"}
    assert {(row[-2], row[-1]) for row in tp} == {("ring/simple", "nvlink")}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Blackwell and GB200 NVL72"):readme.index("## Scenario format")]
    assert "print\n`ring/simple`" in section or "print `ring/simple`" in section
    assert "runs on NVLink (NVLS)" not in section
    code, out, _ = cli("collective", "--system", "gb200_nvl72", "--op", "all_gather", "--ranks", 16, "--bytes",
                       "256MiB")
    assert code == 0 and "ring/simple" in out and "419.68" in out     # the README's 420 us
    code, out, _ = cli("collective", "--system", "gb200_nvl72", "--op", "all_reduce", "--ranks", 16, "--bytes",
                       "256MiB")
    assert code == 0 and "nvls/simple" in out                           # the README's NVLS all_reduce


def test_serve_labels_the_static_batch_and_the_steady_state_curve(cli):
    """The headline TTFT is the prefill of the whole static batch (64 x 2048 tokens at once), the curve's TTFT a new
    request's in steady state: the screen says which is which, above each."""
    code, out, _ = cli("serve", ROOT / "scenarios" / "serve_llama3_70b_h100_tp8.yaml")
    assert code == 0
    lines = out.splitlines()
    static = lines.index("static batch: all 64 requests of a replica arrive at once and prefill together (TTFT: the "
                         "whole batch's prefill)")
    assert lines[static + 1].startswith("prefill") and re.match(r"TTFT \d", lines[static + 3])
    curve = lines.index("latency-throughput curve: continuous batching in steady state, `concurrency` requests in "
                        "flight;")
    assert lines[curve + 1] == ("a new request waits for the next iteration and prefills alone (TTFT: half an "
                                "iteration + its prefill + one decode step)")
    assert lines[curve + 2].split()[:3] == ["concurrency", "batch", "TTFT"]
