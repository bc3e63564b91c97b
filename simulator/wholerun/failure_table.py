"""The schema of the shipped failure table (simulator/wholerun/data/failure_rates.yaml): strict, frozen pydantic
models, each number bounded by a ``Field`` constraint and each release by a pattern, read through the shared located
path (:func:`simulator.yamlio.validation_error_to_user_error`), so a bad entry exits 2 with the file, the line, the
key path and the rule, as every other YAML table does.

Units: failures per component per day (``rates_per_day``), seconds and GPU counts (``restart_s``); docs/whole_run.md,
"Failures" and "Restart".
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from simulator.errors import UserError
from simulator.scenario.run_section import NCCL_RELEASE
from simulator.yamlio import LocatedYaml, validation_error_to_user_error


def _rule(rule: str) -> WrapValidator:
    """Name the rule in the message when the value itself breaks its type or bound (``must be ... , got x``); a
    problem inside a nested entry keeps its own message and key path."""

    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as err:
            if any(e["loc"] for e in err.errors()):
                raise
            raise PydanticCustomError("rule", "{rule}, got {got}", {"rule": rule, "got": repr(value)}) from None

    return WrapValidator(wrap)


#: a count or a time: finite, >= 0 (a YAML boolean is not a number)
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False), _rule("must be a finite number >= 0")]
#: the rank count a measurement was taken at
GpuCount = Annotated[int, Field(ge=1), _rule("must be a whole number of GPUs >= 1")]
#: an NCCL release (the same pattern as the scenario's run.restart.nccl_version)
Release = Annotated[str, Field(pattern=NCCL_RELEASE),
                    _rule("must be an NCCL release as a quoted MAJOR.MINOR[.PATCH] string")]
#: where a number comes from
Source = Annotated[str, Field(min_length=1), _rule("must be a non-empty text naming where the number comes from")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Sourced(_Strict):
    """One sourced number: failures per component per day, or seconds of a restart part."""

    value: NonNegative = Field(description="the number, in the unit its table gives")
    source: Source = Field(description="the paper, issue or file (with its version) the number comes from")


class Rates(_Strict):
    """``rates_per_day``: failures per component per day (docs/whole_run.md, "Failures")."""

    gpu: Sourced = Field(description="failures per GPU per day")
    host: Sourced = Field(description="failures per node per day")
    nic: Sourced = Field(description="failures per network card per day")
    switch: Sourced = Field(description="failures per fabric switch per day")
    software: Sourced = Field(description="job-wide software failures per node per day")


class NcclBase(_Strict):
    """A part of NCCL's set-up measured at a rank count; as ``base``, the one-node time (it does not grow with N)."""

    seconds: NonNegative = Field(description="the part's measured time at ``gpus`` ranks, s")
    gpus: GpuCount = Field(description="the rank count it was measured at")
    source: Source = Field(description="where the measurement (and a term's release) comes from")


class QuadraticTerm(NcclBase):
    """An O(N^2) part of NCCL's set-up: ``seconds`` measured at ``gpus`` ranks, present before ``until_nccl``."""

    until_nccl: Release = Field(description="the first NCCL release without this part")


class NcclInit(_Strict):
    """NCCL's set-up as a form in the job's GPU count N: ``base`` + the ``quadratic`` terms its release still has,
    each scaled by (N / its gpus)^2 (docs/whole_run.md, "Restart")."""

    form: str | None = Field(None, description="the form in words (documentation only)")
    default_nccl_version: Release = Field(description="the release assumed when run.restart.nccl_version is null")
    default_nccl_source: str | None = Field(None, description="why that release is the default")
    base: NcclBase = Field(description="the one-node time")
    quadratic: Annotated[list[QuadraticTerm], _rule("must be a list of {seconds, gpus, until_nccl} (empty for none)")] \
        = Field(description="the O(N^2) parts, each until the NCCL release that removed it")


class Restart(_Strict):
    """``restart_s``: the parts of a restart, seconds (docs/whole_run.md, "Restart")."""

    reschedule: Sourced = Field(description="detect the failure and requeue or swap a node, s")
    init: Sourced = Field(description="process launch, imports and model construction, s")
    nccl_init: NcclInit = Field(description="NCCL's set-up, a form in the GPU count")
    warmup: Sourced = Field(description="slow first steps after a restart, s")


class FailureTable(_Strict):
    """The whole failure table: per-component rates and the restart's parts."""

    rates_per_day: Rates = Field(description="failures per component per day")
    restart_s: Restart = Field(description="the restart's parts, s")


def parse_table(located: LocatedYaml) -> FailureTable:
    """The failure table read from ``located``; a bad entry raises :class:`UserError` naming the file, the line, the
    key path and the rule (exit 2)."""
    if not isinstance(located.data, dict):
        raise UserError("the failure table is a mapping of rates_per_day and restart_s", file=located.file)
    try:
        return FailureTable.model_validate(located.data)
    except ValidationError as exc:
        raise validation_error_to_user_error(exc, file=located.file, located=located,
                                             accepted=sorted(FailureTable.model_fields)) from None
