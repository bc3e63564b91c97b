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
from simulator.schedule import simulate_step
from simulator.topology import topology_of
from simulator.validation.trace_calibration import calibrate_trace, efficiency_yaml_data

#: the module the profile machinery lives in (profile_schema.md); the round trip needs it
PROFILES_MODULE = "simulator.implementation.profiles"


class ProfilesMissing(RuntimeError):
    """The implementation-profile machinery is not in this build (the round trip cannot run yet)."""


def profiles_available() -> bool:
    return importlib.util.find_spec(PROFILES_MODULE) is not None


@dataclass(frozen=True)
class RoundTrip:
    trace: str
    predicted_s: float        # step time with the calibrated profile and efficiency override
    measured_s: float
    baseline_s: float         # the same scenario as given (no profile, the shipped efficiency table)

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def baseline_error(self) -> float:
        return self.baseline_s / self.measured_s - 1.0


def _step_s(scenario, efficiency=None) -> float:
    """The training step time of a loaded scenario (as simulator.entries.simulate prices it), with an optional
    efficiency table in place of the shipped one."""
    return simulate_step(scenario.model, scenario.plan, topology_of(scenario.cluster), efficiency=efficiency,
                         moe=scenario.moe, gpu_speed_sigma=scenario.system.gpu_speed_sigma).step_s


def trace_round_trip(trace: str | Path, scenario: str | Path | dict, measured_step_s: float, workdir: str | Path,
                     base: str = "pytorch") -> RoundTrip:
    """Calibrate on ``trace``, write the profile to ``workdir`` and price ``scenario`` (another shape of the traced
    model on the traced GPU) with ``implementation:`` set to it and the fitted efficiency table; compare with
    ``measured_step_s``. A scenario on another GPU than the trace's raises :class:`UserError` naming both."""
    result = calibrate_trace(trace, "trace_round_trip", base=base)
    plain = load_scenario(scenario)
    gpu = plain.cluster.node.gpu
    if gpu.name != result.gpu.name:
        raise UserError(f"the trace was recorded on {result.stats.gpu_name!r} ({result.gpu.name}), the scenario runs "
                        f"on {gpu.name}: a round trip stays on one GPU", file=str(trace))
    baseline = _step_s(plain)
    if not profiles_available():
        raise ProfilesMissing(f"{PROFILES_MODULE} is not in this build: the profile cannot be applied (baseline "
                              f"{baseline:.6f} s vs measured {measured_step_s:.6f} s)")
    workdir = Path(workdir)
    profile_path = workdir / "trace_round_trip.profile.yaml"
    profile_path.write_text(yaml.safe_dump(result.profile, sort_keys=False), encoding="utf-8")
    if result.efficiency is not None:
        (workdir / "trace_round_trip.efficiency.yaml").write_text(
            yaml.safe_dump(efficiency_yaml_data(result.efficiency), sort_keys=False), encoding="utf-8")
    calibrated = load_scenario(scenario, overrides={"implementation": str(profile_path)})
    return RoundTrip(str(trace), _step_s(calibrated, result.efficiency), measured_step_s, baseline)
