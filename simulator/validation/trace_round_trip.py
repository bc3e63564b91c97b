"""The trace round trip of issue 28 (item 4): calibrate on a trace of one shape (batch, sequence length), predict
another shape of the same model with the written profile and efficiency override, compare with its measured step.

Needs the implementation-profile machinery (a scenario's ``implementation: path.yaml``,
``simulator.implementation.profiles``); without it :func:`trace_round_trip` raises :class:`ProfilesMissing` after
computing the baseline, so a caller (or a test) can tell "not wired yet" from a failed prediction.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import yaml

from simulator.errors import UserError
from simulator.scenario.load import load_scenario
from simulator.validation.trace_calibration import calibrate_trace, efficiency_yaml_data, step_gpu_s

#: the module the profile machinery lives in (profile_schema.md); the round trip needs it
PROFILES_MODULE = "simulator.implementation.profiles"


class ProfilesMissing(RuntimeError):
    """The implementation-profile machinery is not in this build (the round trip cannot run yet)."""


def profiles_available() -> bool:
    return importlib.util.find_spec(PROFILES_MODULE) is not None


@dataclass(frozen=True)
class RoundTrip:
    trace: str
    predicted_s: float        # the model's step for the other shape, calibrated on the trace
    measured_s: float
    baseline_s: float         # the same scenario as given (no profile, the shipped efficiency table)

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def baseline_error(self) -> float:
        return self.baseline_s / self.measured_s - 1.0


def gpu_round_trip(trace: str | Path, traced: str | Path | dict, other: str | Path | dict,
                   measured_gpu_s: float) -> RoundTrip:
    """The GPU-work half, which runs today: fit the efficiency table on ``trace`` (GEMM peak fraction, SDPA rate,
    memory efficiency against the scenario ``traced`` of the traced run) and price ``other`` (another shape of the
    same model on the same GPU) with it; ``measured_gpu_s``: the other shape's GPU busy time per step (its trace's
    ``step_gpu_busy_s``). A scenario on another GPU than the trace's raises :class:`UserError` naming both."""
    result = _calibrated(trace, traced, other)
    plain = load_scenario(other)
    return RoundTrip(str(trace), step_gpu_s(plain, result.efficiency), measured_gpu_s, step_gpu_s(plain))


def _calibrated(trace, traced, other, profiler_event_s: float = 0.0):
    fitted_on = load_scenario(traced)
    result = calibrate_trace(trace, "trace_round_trip", base="pytorch", scenario=fitted_on,
                             profiler_event_s=profiler_event_s)
    for scenario in (fitted_on, load_scenario(other)):
        gpu = scenario.cluster.node.gpu
        if gpu.name != result.gpu.name:
            raise UserError(f"the trace was recorded on {result.stats.gpu_name!r} ({result.gpu.name}), the scenario "
                            f"runs on {gpu.name}: a round trip stays on one GPU", file=str(trace))
    return result


def trace_round_trip(trace: str | Path, traced: str | Path | dict, other: str | Path | dict,
                     measured_step_s: float, workdir: str | Path, profiler_event_s: float = 0.0) -> RoundTrip:
    """The whole round trip of issue 28: calibrate on ``trace`` (the run the scenario ``traced`` describes), write
    the profile to ``workdir`` and price ``other`` with ``implementation:`` set to it and the fitted efficiency
    table; compare with ``measured_step_s`` (the other shape's measured step, host time included).
    ``profiler_event_s``: see :func:`calibrate_trace` (the trace's host spacings carry the profiler's own cost).
    Raises :class:`ProfilesMissing` where the profile machinery is not in the build."""
    result = _calibrated(trace, traced, other, profiler_event_s)
    baseline = step_gpu_s(load_scenario(other))
    if not profiles_available():
        raise ProfilesMissing(f"{PROFILES_MODULE} is not in this build: the profile cannot be applied (baseline "
                              f"{baseline:.6f} s vs measured {measured_step_s:.6f} s)")
    workdir = Path(workdir)
    profile_path = workdir / "trace_round_trip.profile.yaml"
    profile_path.write_text(yaml.safe_dump(result.profile, sort_keys=False), encoding="utf-8")
    (workdir / "trace_round_trip.efficiency.yaml").write_text(
        yaml.safe_dump(efficiency_yaml_data(result.efficiency), sort_keys=False), encoding="utf-8")
    calibrated = load_scenario(other, overrides={"implementation": str(profile_path)})
    return RoundTrip(str(trace), step_gpu_s(calibrated, result.efficiency), measured_step_s, baseline)
