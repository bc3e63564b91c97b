"""Helpers of the hostile-input suite: run the CLI in-process or as a bounded subprocess."""

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: every hostile input must stay under this resident memory (a size, not a time: timings are benchmarks' business,
#: benchmarks/bench_hostile.py); HANG_S only stops a hung run, far above any honest one on a loaded machine
MAX_RSS_BYTES, HANG_S = 2**30, 300


@pytest.fixture
def cli(capsys):
    """``cli(*argv) -> (exit code, stdout, stderr)``, in-process (argparse's SystemExit gives its code)."""

    def run(*argv):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return run


@pytest.fixture
def bounded():
    """``bounded(*argv) -> (exit code, stdout, stderr)`` of ``python -m simulator`` in a fresh process, asserting
    its resident memory stayed under MAX_RSS_BYTES (its time is checked by benchmarks/bench_hostile.py)."""

    def run(*argv, cwd=None):
        proc = subprocess.run([sys.executable, "-m", "simulator", *map(str, argv)], capture_output=True, text=True,
                              timeout=HANG_S, cwd=cwd or ROOT)
        assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 < MAX_RSS_BYTES
        assert "Traceback" not in proc.stderr
        return proc.returncode, proc.stdout, proc.stderr

    return run
