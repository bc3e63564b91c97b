"""Helpers of the hostile-input suite: run the CLI in-process or as a bounded subprocess."""

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: every hostile input must finish (with exit 2) within these bounds
SECONDS, MAX_RSS_BYTES = 10, 2**30


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
    it finished within SECONDS and its resident memory stayed under MAX_RSS_BYTES."""

    def run(*argv, cwd=None):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "simulator", *map(str, argv)], capture_output=True, text=True,
                              timeout=SECONDS, cwd=cwd or ROOT)
        assert time.perf_counter() - start < SECONDS
        assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 < MAX_RSS_BYTES
        assert "Traceback" not in proc.stderr
        return proc.returncode, proc.stdout, proc.stderr

    return run
