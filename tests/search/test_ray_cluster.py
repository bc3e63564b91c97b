"""``--executor ray`` on a two-node Ray cluster started on this machine (issue 30, item 4): a head
(``ray start --head``) and a second raylet (``ray start --address``), each with its own temp dir, ports and one CPU;
a hardware x plan study (tests/search/ray_study.py) run through the cluster gives the same counts and the same ten
best plans, with the same step times, as the same study run in one process, and both nodes ran shards.

Each ``ray start --block`` runs in a session of its own, so its Ray processes (GCS, raylet, workers, agents) form a
process group this test started; teardown sends that group SIGTERM, then SIGKILL, even when the test fails. It does
not run ``ray stop``, which stops every Ray process of the user on the machine, other sessions' clusters included.
Every wait has a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the two-node test needs Ray: pip install -e '.[ray]'")

ROOT = Path(__file__).resolve().parents[2]
START_S = 120      # each raylet registering with the cluster (a loaded 2-core machine: ~10-30 s)
PROBE_S = 30       # one look at the cluster's nodes
STUDY_S = 300      # the study's driver (~10-60 s)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_args(temp_dir: Path) -> list[str]:
    """The ports a raylet opens, each free (two raylets on one machine cannot share the defaults), and its temp dir."""
    names = ("--node-manager-port", "--object-manager-port", "--metrics-export-port", "--runtime-env-agent-port",
             "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port")
    ports = _free_ports(len(names) + 1)
    low = 20000 + ports[-1] % 20000     # 64 worker ports in a range chosen from a free port
    return [*(f"{n}={p}" for n, p in zip(names, ports, strict=False)), f"--min-worker-port={low}",
            f"--max-worker-port={low + 63}", f"--temp-dir={temp_dir}", "--num-cpus=1",
            "--disable-usage-stats", "--block"]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _alive(proc: subprocess.Popen) -> bool:
    """Whether any process of ``proc``'s group (its own session) is left: the group outlives its leader."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to the process groups of every ``ray start --block`` at once, SIGKILL to those left after a short
    grace (nothing of the cluster is kept, so Ray's own graceful shutdown, ~10 s per node, is not waited for)."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in procs):
            time.sleep(0.2)
        if not any(_alive(p) for p in procs):
            return


def _wait_for_nodes(address: str, count: int, env: dict[str, str], procs: list[subprocess.Popen]) -> None:
    code = ("import sys, ray; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"ray start exited with {p.returncode}"
        try:
            run = subprocess.run([sys.executable, "-c", code, address], cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=PROBE_S)
        except subprocess.TimeoutExpired:
            continue
        if run.returncode == 0 and int(run.stdout.split()[-1]) >= count:
            return
        time.sleep(2)
    pytest.fail(f"the cluster at {address} did not reach {count} nodes in {START_S} s")


def _study(args: list[str], env: dict[str, str]) -> dict:
    run = subprocess.run([sys.executable, "-m", "tests.search.ray_study", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=STUDY_S)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture()
def two_nodes(tmp_path_factory):
    """(address, env, trace folder) of a running two-node cluster; stopped at teardown, whatever happened."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}   # Ray 2.60 turns on token authentication
    env.pop("RAY_ADDRESS", None)
    logs = tmp_path_factory.mktemp("ray_logs")
    procs: list[subprocess.Popen] = []
    # Ray's session sockets live under the temp dir: keep its path short (a Unix socket path has ~107 bytes)
    with tempfile.TemporaryDirectory(prefix="rh", dir="/tmp") as head_dir, \
            tempfile.TemporaryDirectory(prefix="rw", dir="/tmp") as worker_dir:
        try:
            port, dash = _free_ports(2)
            address = f"127.0.0.1:{port}"
            procs.append(_start(["--head", f"--port={port}", f"--dashboard-port={dash}", "--include-dashboard=false",
                                 *_node_args(Path(head_dir))], env, logs / "head.log"))
            _wait_for_nodes(address, 1, env, procs)
            procs.append(_start([f"--address={address}", *_node_args(Path(worker_dir))], env, logs / "worker.log"))
            _wait_for_nodes(address, 2, env, procs)
            yield address, env, tmp_path_factory.mktemp("ray_trace")
        finally:
            _stop(procs)


@pytest.mark.ray_cluster
def test_two_node_study_ranks_like_local(two_nodes):
    address, env, trace = two_nodes
    remote = _study(["ray", address, str(trace)], env)
    local = _study(["local"], env)
    assert set(remote) == set(local) == {"dgx_a100_80gb x 2", "dgx_h100 x 2", "study_top", "timing"}
    for option in ("dgx_a100_80gb x 2", "dgx_h100 x 2"):
        r, lo = remote[option], local[option]
        assert (r["evaluated"], r["valid"], r["rejected"]) == (lo["evaluated"], lo["valid"], lo["rejected"])
        assert lo["valid"] >= 10 and r["top"] == lo["top"]
    assert remote["study_top"] == local["study_top"] and len(local["study_top"]) == 10
    assert len(list(trace.iterdir())) == 2, "both nodes ran shards of the study"
    t = remote["timing"]      # docs/search.md quotes these (pytest -s)
    print(f"two-node study: {t['points']:,} points in {t['wall_s']:.1f} s wall on 2 Ray CPUs "
          f"({2 * t['wall_s'] / t['points'] * 1e6:.0f} core-us per point; local {local['timing']['wall_s']:.1f} s)")
