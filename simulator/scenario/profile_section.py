"""The implementation profile a scenario runs (``training.framework`` and ``implementation:``), and the defaults it
gives the ``training:`` and ``serving:`` keys the user did not write (:mod:`simulator.implementation.profiles`)."""

from __future__ import annotations

from typing import Any

from simulator.errors import UserError
from simulator.implementation.profiles import Profile, resolve_profile


def scenario_profile(data: dict, file: str | None) -> Profile:
    """The profile of a scenario's merged ``data``: the shipped one ``training.framework`` names (default
    ``megatron``), with the ``implementation:`` section (a profile file or field overrides) on top."""
    training = data.get("training")
    framework = training.get("framework", "megatron") if isinstance(training, dict) else "megatron"
    if not isinstance(framework, str):
        raise UserError(f"expected a profile name, got {type(framework).__name__} {framework!r}",
                        key_path="training.framework")
    return resolve_profile(framework, data.get("implementation"), file)


def with_defaults(section: Any, defaults: tuple[tuple[str, Any], ...]) -> Any:
    """``section`` (a mapping as written) with the profile's ``defaults`` for the keys it does not give; anything
    else is returned as it is, for the section's own validation to report."""
    if not defaults or not isinstance(section, dict):
        return section
    out = dict(section)
    for key, value in defaults:
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**value, **out[key]}  # a mapping (serving.scheduler) is merged key by key
        else:
            out.setdefault(key, value)
    return out


def training_with_profile(training: Any, profile: Profile, given: bool) -> Any:
    """``training:`` with the profile's defaults, and the resolved profile itself when the scenario gave an
    ``implementation:`` section (``given``): a shipped profile is found again by its name."""
    if isinstance(training, dict) and "implementation" in training:
        raise UserError("not a training key: a profile file or profile overrides go in the top-level "
                        "`implementation:` section (docs/implementation_profiles.md)", key_path="training.implementation")
    out = with_defaults(training if training is not None else {}, profile.training_defaults)
    if given and isinstance(out, dict):
        out = dict(out, implementation=profile)
    return out
