"""Build a strict pydantic model from user data, turning pydantic's ValidationError into a located UserError."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from simulator.errors import UserError
from simulator.yamlio import validation_error_to_user_error

M = TypeVar("M", bound=BaseModel)


def build(cls: type[M], data: Any, *, key_prefix: str, file: str | None = None) -> M:
    """Validate ``data`` into ``cls``; on failure raise UserError naming the bad key(s) and the rule.

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
        raise validation_error_to_user_error(err, file=file, key_prefix=key_prefix,
                                             accepted=sorted(cls.model_fields)) from None
