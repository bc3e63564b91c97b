"""Build a strict pydantic model from user data, turning pydantic's ValidationError into a located UserError."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from simulator.errors import UserError

M = TypeVar("M", bound=BaseModel)


def build(cls: type[M], data: Any, *, key_prefix: str, file: str | None = None) -> M:
    """Validate ``data`` into ``cls``; on failure raise UserError naming the first bad key and the rule.

    Args:
        cls: the pydantic model class.
        data: a mapping (from YAML/JSON) or an instance of ``cls``.
        key_prefix: dotted path of ``data`` in the scenario (``parallel``, ``model``).
        file: the file the data came from, if any.
    """
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping, got {type(data).__name__}", file=file, key_path=key_prefix)
    try:
        return cls.model_validate(data)
    except UserError as err:
        raise err.located(file=file) from None
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        key = f"{key_prefix}.{loc}" if loc else key_prefix
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(sorted(cls.model_fields))
            msg = f"unknown key (accepted: {allowed})"
        elif first["type"] == "literal_error":
            msg = f"{msg}, got {first.get('input')!r}"
        raise UserError(msg, file=file, key_path=key) from None
