"""Read YAML files with line numbers, and turn pydantic validation errors into located :class:`UserError`.

Every loader of user files (profiles, scenarios, calibrations) goes through here, so a mistake is always
reported as ``file:line: key.path: what is wrong``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simulator.errors import UserError


class LocatedYaml:
    """A parsed YAML document with the line of every key path (``a.b.0.c`` -> 1-based line)."""

    def __init__(self, data: Any, lines: dict[str, int], file: str) -> None:
        self.data = data
        self.lines = lines
        self.file = file

    def line_of(self, key_path: str) -> int | None:
        """Line of ``key_path`` or of its nearest parent that has one."""
        parts = key_path.split(".") if key_path else []
        while parts:
            line = self.lines.get(".".join(parts))
            if line is not None:
                return line
            parts.pop()
        return None


def read_yaml(path: str | Path) -> LocatedYaml:
    """Parse ``path``; a missing file or malformed YAML is a :class:`UserError` naming the file and line."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", file=file) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read: {exc.__class__.__name__}", file=file) from None
    return parse_yaml_text(text, file)


def parse_yaml_text(text: str, file: str = "<string>") -> LocatedYaml:
    """Parse YAML text, recording the line of every mapping key and sequence item."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"malformed YAML: {problem}", file=file,
                        line=mark.line + 1 if mark else None) from None
    lines: dict[str, int] = {}
    if node is not None:
        _record_lines(node, "", lines)
    return LocatedYaml(data, lines, file)


def _record_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            lines[path] = key_node.start_mark.line + 1
            _record_lines(value_node, path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = f"{prefix}.{index}" if prefix else str(index)
            lines[path] = item.start_mark.line + 1
            _record_lines(item, path, lines)


def validation_error_to_user_error(exc: Any, *, file: str | None = None, located: LocatedYaml | None = None,
                                   key_prefix: str | None = None, accepted: list[str] | None = None) -> UserError:
    """Turn a pydantic ``ValidationError`` into one :class:`UserError`: the first problem gives the location, and
    every further problem follows on its own ``file:line: key.path: message`` line. Unknown keys come first (a typo
    is usually also the cause of a "required key is missing"); ``accepted`` lists the valid top-level keys."""
    problems = []
    for error in sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden"):
        path = ".".join(str(p) for p in error["loc"] if p != "__root__")
        if key_prefix:
            path = f"{key_prefix}.{path}" if path else key_prefix
        line = located.line_of(path) if located and path else None
        message = _explain(error)
        if error["type"] == "extra_forbidden" and accepted and len(error["loc"]) == 1:
            message = f"unknown key (accepted: {', '.join(accepted)})"
        problems.append(UserError(message, file=file, key_path=path or None, line=line))
    first = problems[0]
    if len(problems) > 1:
        first.message += "".join(f"\n  {p}" for p in problems[1:])
    return first


def _explain(error: dict) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; unknown keys are not ignored)"
    if kind == "missing":
        return "required key is missing"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind in ("literal_error", "enum"):
        return f"{message}, got {error.get('input')!r}"
    return message
