"""The registry of implementation profiles: the shipped YAML files (``simulator/implementation/profiles/``), a
user's profile file, and a scenario's overrides, each validated with file, line and key path.

A profile file may name a ``base:`` profile; its fields are the base's, deep-merged with the file's (mappings
merge key by key, anything else replaces). A scenario's ``implementation:`` is a path string (a profile file) or
a mapping of fields to override, with an optional ``file:`` to start from instead of ``training.framework``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.errors import UserError
from simulator.implementation.profiles import ImplementationProfile
from simulator.yamlio import LocatedYaml, read_yaml, validation_error_to_user_error

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` on it: mappings merge key by key, any other value replaces."""
    out = dict(base)
    for key, value in top.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _mapping(doc: LocatedYaml, key_prefix: str | None = None) -> dict[str, Any]:
    if not isinstance(doc.data, dict):
        raise UserError(f"an implementation profile is a mapping, got {type(doc.data).__name__}", file=doc.file,
                        key_path=key_prefix)
    return doc.data


def _validate(data: dict[str, Any], doc: LocatedYaml | None, key_prefix: str | None) -> ImplementationProfile:
    try:
        return ImplementationProfile.model_validate(data)
    except ValidationError as err:
        raise validation_error_to_user_error(err, file=doc.file if doc else None, located=doc, key_prefix=key_prefix,
                                             accepted=sorted(ImplementationProfile.model_fields)) from None


def _resolve_base(data: dict[str, Any], doc: LocatedYaml, key_prefix: str | None,
                  seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data`` on top of its ``base:`` profile's raw fields (the base's own base first)."""
    name = data.get("base")
    if name is None:
        return data
    if name in seen or name == data.get("name"):
        raise UserError(f"base {name!r} inherits from itself ({' -> '.join((*seen, name))})", file=doc.file,
                        key_path=f"{key_prefix}.base" if key_prefix else "base", line=doc.line_of("base"))
    raw = _shipped_raw().get(name)
    if raw is None:
        raise UserError(f"unknown base profile {name!r} (shipped: {', '.join(sorted(_shipped_raw()))})",
                        file=doc.file, key_path=f"{key_prefix}.base" if key_prefix else "base",
                        line=doc.line_of(f"{key_prefix}.base" if key_prefix else "base"))
    merged = deep_merge(_resolve_base(raw[0], raw[1], None, (*seen, str(data.get("name")))), data)
    merged["base"] = name
    return merged


@cache
def _shipped_raw() -> dict[str, tuple[dict[str, Any], LocatedYaml]]:
    out = {}
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        doc = read_yaml(path)
        data = _mapping(doc)
        if data.get("name") != path.stem:
            raise UserError(f"name {data.get('name')!r} must be the file stem {path.stem!r}", file=str(path),
                            key_path="name", line=doc.line_of("name"))
        out[path.stem] = (data, doc)
    return out


@cache
def shipped_profiles() -> dict[str, ImplementationProfile]:
    """Every shipped profile by name, its base resolved."""
    return {name: _validate(_resolve_base(data, doc, None), doc, None)
            for name, (data, doc) in _shipped_raw().items()}


def profile_names(trains: bool | None = None) -> tuple[str, ...]:
    """The shipped names; ``trains``: only those ``training.framework`` may name (True) or the engines (False)."""
    return tuple(n for n, p in shipped_profiles().items() if trains is None or p.trains == trains)


def profile_named(name: str, key_path: str = "training.framework") -> ImplementationProfile:
    """The shipped profile ``name``; an unknown name is a UserError listing the names."""
    found = shipped_profiles().get(name)
    if found is None:
        raise UserError(f"unknown implementation profile {name!r} (shipped: {', '.join(profile_names())})",
                        key_path=key_path)
    return found


def load_profile(path: str | Path) -> ImplementationProfile:
    """A profile file (e.g. written by ``simulator calibrate --trace``), its ``base:`` resolved."""
    doc = read_yaml(path)
    return _validate(_resolve_base(_mapping(doc), doc, None), doc, None)


def with_overrides(profile: ImplementationProfile, overrides: dict[str, Any], *, file: str | None = None,
                   located: LocatedYaml | None = None, key_prefix: str = "implementation") -> ImplementationProfile:
    """``profile`` with ``overrides`` deep-merged on it, validated where the overrides were written."""
    data = deep_merge(profile.model_dump(), overrides)
    try:
        return ImplementationProfile.model_validate(data)
    except ValidationError as err:
        raise validation_error_to_user_error(err, file=file, located=located, key_prefix=key_prefix,
                                             accepted=sorted(ImplementationProfile.model_fields)) from None


def scenario_implementation(framework: str, spec: str | dict[str, Any] | None, *, file: str | None = None,
                            located: LocatedYaml | None = None, base_dir: Path | None = None
                            ) -> ImplementationProfile:
    """The profile a scenario runs: ``training.framework``'s, or the ``implementation:`` file, with the
    ``implementation:`` mapping's overrides on it. Relative paths are relative to ``base_dir``."""
    def line(key: str) -> int | None:
        return located.line_of(key) if located else None

    def open_file(value: Any, key: str) -> ImplementationProfile:
        if not isinstance(value, str):
            raise UserError(f"expected a path to a profile file, got {type(value).__name__}", file=file,
                            key_path=key, line=line(key))
        path = Path(value)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return load_profile(path)

    if spec is None:
        return profile_named(framework)
    if isinstance(spec, str):
        return open_file(spec, "implementation")
    if not isinstance(spec, dict):
        raise UserError(f"expected a profile file path or a mapping of fields, got {type(spec).__name__}",
                        file=file, key_path="implementation", line=line("implementation"))
    rest = {k: v for k, v in spec.items() if k != "file"}
    start = open_file(spec["file"], "implementation.file") if "file" in spec else profile_named(framework)
    return with_overrides(start, rest, file=file, located=located) if rest else start
