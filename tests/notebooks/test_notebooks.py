"""Execute every notebooks/*.ipynb top to bottom (a fresh python3 kernel, cwd = repository root, the repository on
PYTHONPATH) and fail on any cell error or on a notebook committed with outputs. Each notebook ends with a cell that
asserts the findings its conclusion states, so executing it tests them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need the test extra (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need the test extra (nbclient)")
pytest.importorskip("ipykernel", reason="notebook tests need the test extra (ipykernel)")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "python3"
#: a hang guard, not a performance target: how long a notebook takes is measured by benchmarks/bench_notebooks.py
CELL_TIMEOUT_S = 120


def _ensure_kernelspec() -> None:
    """pip installs ipykernel's python3 kernelspec under sys.prefix and jupyter_client falls back to ipykernel's
    own spec; register one in this environment only if neither is found (e.g. a --no-data-files install)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL], check=True,
                       capture_output=True)


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 5, f"expected the five what-if notebooks in {ROOT / 'notebooks'}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_saved_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"


CHECK_CELL = "# The conclusion above, checked"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_ends_by_asserting_its_conclusion(path):
    nb = nbformat.read(path, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    conclusion = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## Conclusion")]
    assert conclusion, f"{path.name}: no '## Conclusion' section"
    assert code[-1].startswith(CHECK_CELL) and code[-1].count("assert ") >= 5, \
        f"{path.name}: the last cell must assert the conclusion's findings (start it with {CHECK_CELL!r})"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    _ensure_kernelspec()
    # The kernel inherits this environment: the repository on PYTHONPATH, a non-interactive matplotlib backend.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()   # raises CellExecutionError (with the cell and traceback) on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: {errors[0].ename}: {errors[0].evalue}"
