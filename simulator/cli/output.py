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


NOISE = 1e-12  # a part of the step below this fraction of it is float noise (4.16e-17 s of "bubble")


def denoised(obj: Any) -> Any:
    """``obj`` with every time in a ``breakdown_s`` below :data:`NOISE` of its sibling ``step_s`` written as 0."""
    if isinstance(obj, list | tuple):
        return [denoised(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: denoised(v) for k, v in obj.items()}
    step, parts = out.get("step_s"), out.get("breakdown_s")
    if isinstance(step, float) and math.isfinite(step) and isinstance(parts, dict):
        out["breakdown_s"] = {k: 0.0 if isinstance(v, float) and abs(v) < NOISE * abs(step) else v
                              for k, v in parts.items()}
    return out


def print_json(obj: Any, **kwargs) -> None:
    """Print ``obj`` as strict JSON (no NaN/Infinity, no float noise in a step's breakdown); a nulled value is
    named in a warning on stderr."""
    nulled: list[str] = []
    text = json.dumps(finite(denoised(obj), nulled=nulled), allow_nan=False, **kwargs)
    print(text)
    if nulled:
        print("warning: no finite value for " + ", ".join(nulled[:5]) + (" ..." if len(nulled) > 5 else "")
              + "; written as null", file=sys.stderr)
