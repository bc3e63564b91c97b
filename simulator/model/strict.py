"""Build a strict pydantic model from user data, turning pydantic's ValidationError into a located UserError."""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from simulator.caching import memo
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
    _reject_bool_numbers(cls, data, key_prefix, file)
    try:
        return cls.model_validate(data)
    except UserError as err:
        raise err.located(file=file) from None
    except ValidationError as err:
        raise validation_error_to_user_error(err, file=file, key_prefix=key_prefix,
                                             accepted=sorted(cls.model_fields)) from None


def _reject_bool_numbers(cls: type[BaseModel], data: dict, key_prefix: str, file: str | None) -> None:
    """``tp: true`` is not 1: pydantic's lax mode reads a YAML boolean as an integer, so refuse it for a field that
    takes numbers and no booleans."""
    numeric = _numeric_fields(cls)
    for key, value in data.items():
        if isinstance(value, bool) and key in numeric:
            raise UserError(f"expected a number, got {str(value).lower()}", file=file,
                            key_path=f"{key_prefix}.{key}" if key_prefix else key)


@memo(maxsize=256)
def _numeric_fields(cls: type[BaseModel]) -> frozenset[str]:
    """The fields of ``cls`` that take numbers and no booleans (a class's fields are fixed: read them once)."""
    return frozenset(k for k, f in cls.model_fields.items() if numeric_only(f.annotation))


def numeric_only(annotation: Any) -> bool:
    """True for a field type that takes int or float and no bool (``int``, ``int | None``, ``float``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
    else:
        options = (annotation,)
    return bool not in options and any(o in (int, float) for o in options)
