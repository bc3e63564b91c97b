"""Read YAML files with line numbers, and turn pydantic validation errors into located :class:`UserError`.

Every loader of user files (profiles, scenarios, calibrations) goes through here, so a mistake is always
reported as ``file:line: key.path: what is wrong``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import UserError
from simulator.limits import MAX_YAML_BYTES, MAX_YAML_NODES

#: deepest nesting of a YAML document (scenarios nest 4 levels)
MAX_YAML_DEPTH = 64
FLOAT_TAG = "tag:yaml.org,2002:float"


def safe_loader_of(module: Any) -> type:
    """PyYAML's safe loader in C (libyaml's parser, ``CSafeLoader``: same nodes, tags, marks and constructors, 8-10x
    faster) when ``module`` was built with libyaml (its wheels are), else the pure-Python ``SafeLoader``."""
    return module.CSafeLoader if getattr(module, "__with_libyaml__", False) else module.SafeLoader


#: the loader every YAML read uses (tests set it to ``yaml.SafeLoader`` to check the fallback)
SAFE_LOADER = safe_loader_of(yaml)


def _reads_alike(text: str) -> bool:
    """Whether libyaml reads ``text`` as the pure-Python loader does. Their scanners differ on a tab (libyaml takes
    it inside a plain scalar, PyYAML refuses it), a ``?`` in a flow collection (libyaml takes it inside a plain
    scalar there) and a byte-order mark after the start: the only differences that thousands of mutated shipped
    files showed (tests/unit/test_yaml_loaders.py). A text that may hold one of them is left to the pure-Python
    loader, so the data and every message stay PyYAML's; no shipped file is."""
    return "\t" not in text and "\ufeff" not in text[1:] and ("?" not in text or ("[" not in text and "{" not in text))


def fast_safe_load(text: str) -> Any:
    """``yaml.safe_load(text)`` through :data:`SAFE_LOADER`, for the shipped data tables (efficiency, overlap and
    offload coefficients, model presets) that need no line numbers; what libyaml refuses is read again by the
    pure-Python loader, so the outcome and its message are ``yaml.safe_load``'s."""
    if _reads_alike(text):
        try:
            return yaml.load(text, Loader=SAFE_LOADER)
        except (yaml.YAMLError, UnicodeEncodeError, RecursionError):
            pass
    return yaml.safe_load(text)


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


def is_file(path: str | Path) -> bool:
    """``Path.is_file`` that answers False for a name the OS refuses (too long, a NUL byte) instead of raising."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: str | Path) -> bool:
    """``Path.is_dir`` that answers False for a name the OS refuses (too long, a NUL byte) instead of raising."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def read_yaml(path: str | Path) -> LocatedYaml:
    """Parse ``path``; a missing file or malformed YAML is a :class:`UserError` naming the file and line."""
    file = str(path)
    try:
        size = Path(path).stat().st_size
        if is_dir(path):
            raise UserError("is a folder, not a YAML file", file=file)
        if size > MAX_YAML_BYTES:
            raise UserError(f"file is {size:,} bytes; YAML inputs are limited to {MAX_YAML_BYTES:,} bytes "
                            "(docs/errors.md)", file=file)
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", file=file) from None
    except UnicodeDecodeError:
        raise UserError("not a UTF-8 YAML file (an image, a binary or another encoding such as latin-1)",
                        file=file) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise UserError(f"cannot read: {exc.__class__.__name__}", file=file) from None
    return parse_yaml_text(text, file)


def parse_yaml_text(text: str, file: str = "<string>") -> LocatedYaml:
    """Parse YAML text, recording the line of every mapping key and sequence item.

    Before anything is built, the document is checked against the limits of :mod:`simulator.limits` (size, and
    nodes with every alias counted as expanded, so an alias bomb is refused before it expands), duplicate keys
    (an error naming both lines: YAML would silently keep the last) and numbers that are not finite (``.inf``).
    """
    if len(text) > MAX_YAML_BYTES:
        raise UserError(f"text is {len(text):,} characters; YAML inputs are limited to {MAX_YAML_BYTES:,}", file=file)
    if SAFE_LOADER is not yaml.SafeLoader and _reads_alike(text):
        try:
            return _parse(text, file, SAFE_LOADER)
        except (yaml.YAMLError, UnicodeEncodeError, RecursionError):  # a lone surrogate: UnicodeEncodeError
            pass  # libyaml refused it: the pure-Python loader below says why in its own words, or accepts it
    try:
        return _parse(text, file, yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = mark.line + 1 if mark else \
            text.count("\n", 0, exc.position) + 1 if isinstance(exc, yaml.reader.ReaderError) else None
        raise UserError(f"malformed YAML: {problem}", file=file, line=line) from None
    except RecursionError:
        raise UserError(f"malformed YAML: nested more than {MAX_YAML_DEPTH} levels deep", file=file) from None


def _parse(text: str, file: str, loader_class: type) -> LocatedYaml:
    """The document of ``text`` read by ``loader_class``: its nodes checked and their lines recorded before
    anything is built (:func:`parse_yaml_text`)."""
    loader = loader_class(text)  # the pure-Python reader refuses a control character here
    try:
        node = loader.get_single_node()
        lines: dict[str, int] = {}
        if node is not None:
            _check_size(node, file)
            _record_lines(node, "", lines, file)
        data = _construct(loader, node) if node is not None else None
    finally:
        loader.dispose()
    return LocatedYaml(data, lines, file)


def _construct(loader: Any, node: yaml.Node) -> Any:
    """The data of ``node``; a scalar that its explicit tag cannot read (``!!int x``, ``!!bool maybe``) is a
    ``ConstructorError`` at that scalar's line instead of PyYAML's bare ``ValueError`` / ``KeyError``."""
    try:
        return loader.construct_document(node)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        building = list(loader.recursive_objects)  # the nodes under construction, innermost last
        if not building:
            raise
        bad = building[-1]
        what = repr(bad.value) if isinstance(bad, yaml.ScalarNode) else "this value"
        raise yaml.constructor.ConstructorError(None, None, f"{what} is not a valid !!{bad.tag.rsplit(':')[-1]}",
                                                bad.start_mark) from exc


def _check_size(root: yaml.Node, file: str) -> None:
    """Count the nodes of the document as built (an alias counts as a full copy of what it names) without
    building it; refuse more than ``MAX_YAML_NODES``, deeper than ``MAX_YAML_DEPTH`` or a recursive alias."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise UserError("an alias refers to a node that contains it (recursive YAML)", file=file,
                            line=node.start_mark.line + 1)
        if depth > MAX_YAML_DEPTH:
            raise UserError(f"nested more than {MAX_YAML_DEPTH} levels deep", file=file, line=node.start_mark.line + 1)
        open_nodes.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else \
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else []
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_YAML_NODES:
                raise UserError(f"the document has more than {MAX_YAML_NODES:,} values with every alias expanded "
                                "(an alias bomb?); refused before expanding it (docs/errors.md)", file=file,
                                line=child.start_mark.line + 1)
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


def _record_lines(node: yaml.Node, prefix: str, lines: dict[str, int], file: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise UserError("a key must be a plain name, not a list or a mapping", file=file,
                                key_path=prefix or None, line=line)
            path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            key = (key_node.tag, key_node.value)
            if key in seen and key_node.value != "<<":
                raise UserError(f"duplicate key {key_node.value!r}: first on line {seen[key]}, again on line {line} "
                                "(YAML would silently keep the last; keep one)", file=file, key_path=path, line=line)
            seen[key] = line
            lines[path] = line
            _record_lines(value_node, path, lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = f"{prefix}.{index}" if prefix else str(index)
            lines[path] = item.start_mark.line + 1
            _record_lines(item, path, lines, file)
    elif node.tag == FLOAT_TAG and not math.isfinite(_float(node.value)):
        raise UserError(f"{node.value} is not a finite number", file=file, key_path=prefix or None,
                        line=node.start_mark.line + 1)


def check_finite(data: Any, prefix: str = "") -> None:
    """Raise :class:`UserError` at the first float of ``data`` (nested mappings and lists) that is not finite."""
    if isinstance(data, float) and not math.isfinite(data):
        raise UserError(f"{data} is not a finite number", key_path=prefix or None)
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list | tuple) else ()
    for key, value in items:
        check_finite(value, f"{prefix}.{key}" if prefix else str(key))


def _float(text: str) -> float:
    """The value of a YAML 1.1 float scalar (``.inf``, ``-.Inf``, ``.nan``, ``1.0e+400``); 0 for forms float()
    does not read (sexagesimal), which are finite anyway."""
    plain = text.lower().replace("_", "")
    if plain.lstrip("+-") in (".inf", ".nan"):
        return math.inf
    try:
        return float(plain)
    except ValueError:
        return 0.0


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
