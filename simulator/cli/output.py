"""Printing JSON that is JSON: a float that is not finite becomes ``null``, and stderr says which key and why."""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def finite(obj: Any, path: str = "", nulled: list[str] | None = None) -> Any:
    """``obj`` with every NaN/Infinity float replaced by None; the key paths replaced are appended to ``nulled``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        if nulled is not None:
            nulled.append(f"{path or '<value>'} ({obj})")
        return None
    if isinstance(obj, dict):
        return {k: finite(v, f"{path}.{k}" if path else str(k), nulled) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v, f"{path}.{i}" if path else str(i), nulled) for i, v in enumerate(obj)]
    return obj


def print_json(obj: Any, **kwargs) -> None:
    """Print ``obj`` as strict JSON (no NaN/Infinity); a nulled value is named in a warning on stderr."""
    nulled: list[str] = []
    text = json.dumps(finite(obj, nulled=nulled), allow_nan=False, **kwargs)
    print(text)
    if nulled:
        print("warning: no finite value for " + ", ".join(nulled[:5]) + (" ..." if len(nulled) > 5 else "")
              + "; written as null", file=sys.stderr)
