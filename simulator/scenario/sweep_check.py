"""Sweep axes checked against the scenario schema before any plan runs: a misspelled key (``parallel.tpp``) or a
value of the wrong type (``eight``) is the user's mistake (exit 2), not a column of "invalid plan" rows.

Only what one field can say alone is checked here (type, bounds, accepted values); rules across fields
(tp x pp x dp = GPUs) belong to each plan and still make "invalid" rows.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from simulator.errors import UserError
from simulator.implementation.moe_settings import MoeSettings
from simulator.model import ModelSpec
from simulator.model.strict import numeric_only
from simulator.plan import ParallelPlan, TrainingConfig

#: keys that are not fields of a section's model but are read by the loader
_LOADER_KEYS = {"name": str, "description": str, "model.preset": str, "model.hf_config": str,
                "system.calibration": str}


def sections() -> dict[str, type[BaseModel]]:
    from simulator.scenario.load import SystemSection

    return {"system": SystemSection, "model": ModelSpec, "parallel": ParallelPlan, "training": TrainingConfig,
            "moe": MoeSettings}


def axis_type(key: str) -> Any:
    """The type (with its field's bounds) of dotted scenario key ``key``; UserError naming the accepted keys if
    unknown."""
    if key in _LOADER_KEYS:
        return _LOADER_KEYS[key]
    head, _, rest = key.partition(".")
    model: Any = sections().get(head)
    if model is None or not rest:
        raise UserError(f"{key!r} is not a dotted scenario key (e.g. parallel.tp, training.micro_batch, "
                        "system.nodes)")
    walked = head
    for part in rest.split("."):
        nested = _model_of(model)
        if nested is None or part not in nested.model_fields:
            accepted = ", ".join(sorted(nested.model_fields)) if nested else "none (not a mapping)"
            raise UserError(f"{key!r} is not a scenario key: {walked} has no key {part!r} (accepted: {accepted})")
        model = nested.model_fields[part]
        walked = f"{walked}.{part}"
    return Annotated[model.annotation, model]


def _model_of(item: Any) -> type[BaseModel] | None:
    """The pydantic model behind a section class or a field (``FabricSpec | None`` gives FabricSpec)."""
    annotation = getattr(item, "annotation", item)
    for option in (annotation, *typing.get_args(annotation)):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None


def check_calibration(document, swept: tuple[str, ...]) -> None:
    """A sweep's fixed ``system.calibration`` measured on another system than its fixed ``system.profile`` is one
    mistake, not a column of "invalid" rows: refuse it before any plan runs (unless forced)."""
    from simulator.hardware import load_node
    from simulator.hardware.calibration import calibration_system_problem, load_calibration
    from simulator.scenario.load import relative_to_file
    from simulator.yamlio import is_file

    system = document.data.get("system")
    fixed = not any(k in ("system.profile", "system.calibration", "system.force_calibration") for k in swept)
    if not fixed or not isinstance(system, dict) or system.get("force_calibration"):
        return
    path, profile = system.get("calibration"), system.get("profile")
    if not isinstance(path, str) or not isinstance(profile, str):
        return
    path = relative_to_file(path, document.where("system.calibration")[0])
    if Path(profile).suffix in (".yaml", ".yml"):
        profile = relative_to_file(profile, document.where("system.profile")[0])
    if not is_file(path):
        return  # every plan reports the missing file
    problem = calibration_system_problem(load_calibration(path), load_node(profile).name)
    if problem:
        raise document.locate(UserError(f"{path}: {problem} (system.force_calibration: true or --force-calibration "
                                        "applies it anyway)", key_path="system.calibration"))


def check_values(key: str, values: list, key_path: str) -> None:
    """Every value of one axis is valid for its field alone; UserError at ``key_path.<i>`` otherwise."""
    kind = axis_type(key)
    adapter = TypeAdapter(kind)
    numeric = numeric_only(typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind)
    for index, value in enumerate(values):
        where = f"{key_path}.{index}"
        if isinstance(value, bool) and numeric:
            raise UserError(f"expected a number, got {str(value).lower()}", key_path=where)
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise UserError(f"{value!r} is not a valid {key}: {error['msg']}", key_path=where) from None
        except UserError as exc:  # a unit parser or validator of ours
            raise UserError(f"{value!r} is not a valid {key}: {exc.message}", key_path=where) from None
