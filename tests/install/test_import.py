"""``import simulator`` stays light: the optional and heavy dependencies load only where they are used."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_simulator_loads_no_heavy_or_optional_module():
    code = ("import sys, simulator; "
            "print(','.join(m for m in ('scipy', 'pandas', 'matplotlib', 'networkx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
