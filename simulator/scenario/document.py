"""A scenario document: the YAML mapping after ``extends:`` merging, with the file and line of every key."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import UserError
from simulator.yamlio import check_finite, is_dir, read_yaml

MAX_EXTENDS_DEPTH = 8


@dataclass
class Document:
    """Merged scenario data and where each key path was written (``key.path -> (file, line)``)."""

    data: dict[str, Any]
    file: str | None
    origins: dict[str, tuple[str, int]] = field(default_factory=dict)

    def where(self, key_path: str | None) -> tuple[str | None, int | None]:
        """File and line of ``key_path`` or its nearest written parent."""
        parts = key_path.split(".") if key_path else []
        while parts:
            origin = self.origins.get(".".join(parts))
            if origin:
                return origin
            parts.pop()
        return self.file, None

    def locate(self, error: UserError) -> UserError:
        """Fill in the file and line of an error raised with only a key path."""
        if error.file:
            return error
        file, line = self.where(error.key_path)
        return error.located(file=file, line=line)


def read_document(source: str | Path | dict, _depth: int = 0) -> Document:
    """Read a scenario file (or take a dict), following ``extends:`` (a path relative to the file)."""
    if isinstance(source, dict):
        check_finite(source)
        return Document(copy.deepcopy(source), None)
    located = read_yaml(source)
    file = str(source)
    if not isinstance(located.data, dict):
        raise UserError("a scenario must be a YAML mapping with at least a `system:` section", file=file)
    data = dict(located.data)
    origins = {k: (file, line) for k, line in located.lines.items()}
    base_ref = data.pop("extends", None)
    if base_ref is None:
        return Document(data, file, origins)
    if not isinstance(base_ref, str):
        raise UserError("extends must be a path to another scenario file", file=file, key_path="extends",
                        line=located.line_of("extends"))
    if _depth >= MAX_EXTENDS_DEPTH:
        raise UserError(f"extends is nested more than {MAX_EXTENDS_DEPTH} deep (a cycle?)", file=file,
                        key_path="extends", line=located.line_of("extends"))
    base_path = (Path(file).parent / base_ref)
    if is_dir(base_path):
        raise UserError(f"extends names {base_ref!r}, which is a folder ({base_path}); it must name a scenario file",
                        file=file, key_path="extends", line=located.line_of("extends"))
    try:
        base = read_document(base_path, _depth + 1)
    except UserError as exc:
        if exc.file == str(base_path) and exc.message == "file not found":
            raise UserError(f"extends names {base_ref!r}, which does not exist ({base_path})", file=file,
                            key_path="extends", line=located.line_of("extends")) from None
        raise
    merged = merge(base.data, data)
    return Document(merged, file, {**base.origins, **origins})


def merge(base: dict, override: dict) -> dict:
    """Deep merge: mappings merge key by key, anything else in ``override`` replaces the base value."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(data: dict, key_path: str, value: Any) -> None:
    """``data['a']['b'] = value`` for ``a.b``, creating mappings on the way."""
    parts = key_path.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise UserError(f"cannot set {key_path}: {part} is not a mapping", key_path=key_path)
        node = child
    node[parts[-1]] = value
