"""Published and measured reference data, and the model's error tables against them.

``simulator validate`` prints these tables and the validation tests assert on the same functions, so the numbers
a user sees are the numbers CI checks. The data files (``data/``) carry their sources in their headers/READMEs.
"""

from pathlib import Path

#: folder of the reference data shipped with the package
VALIDATION_DATA = Path(__file__).resolve().parent / "data"

__all__ = ["VALIDATION_DATA"]
