"""Model presets shipped as package data (``simulator/model/presets/<name>.yaml``, one file each with its source)."""

from __future__ import annotations

from importlib import resources

from simulator.caching import memo
from simulator.errors import UserError
from simulator.model.spec import ModelSpec
from simulator.model.strict import build
from simulator.yamlio import fast_safe_load


def preset_names() -> list[str]:
    """Names of the shipped presets, sorted."""
    folder = resources.files("simulator.model") / "presets"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


@memo(maxsize=64, loaded=True)
def load_model_preset(name: str) -> ModelSpec:
    """Return the preset ``name`` (e.g. ``gpt3-175b``, ``llama3-70b``) as a validated ModelSpec.

    Raises:
        UserError: unknown preset (the message lists the shipped ones), key path ``model.preset``.
    """
    names = preset_names()
    if name not in names:
        raise UserError(f"unknown model preset {name!r}; accepted: {', '.join(names)}", key_path="model.preset")
    path = resources.files("simulator.model") / "presets" / f"{name}.yaml"
    data = fast_safe_load(path.read_text(encoding="utf-8"))
    return build(ModelSpec, data, key_prefix="model", file=str(path))
