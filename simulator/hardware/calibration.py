"""Calibration: fitted link parameters that overlay the datasheet model, and their YAML form.

A calibration holds, per link class (nvlink, pcie_p2p, shm, net), protocol (ll, ll128, simple, or ``auto`` for
all three) and path, the fitted parameters of the two-regime model (see docs/collectives.md):
``t = max(latency + nsteps*alpha + nsteps*m/small_bw, fill_latency + (nsteps+slack)*m/bandwidth)``.

The path keeps apart what NCCL runs on different channels: ``collective`` entries (ring/tree channels: all_reduce,
all_gather, reduce_scatter, broadcast, reduce) and ``p2p`` entries (point-to-point channels: sendrecv, all_to_all,
the context-parallel ring pass). A file without ``path`` keys (the first format) holds collective entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.caching import memo
from simulator.errors import UserError

LinkClass = Literal["nvlink", "pcie_p2p", "shm", "net"]
ChannelPath = Literal["collective", "p2p"]


class CalibrationEntry(BaseModel):
    """Fitted parameters for one link class and protocol (SI units)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    link_class: LinkClass = Field(description="the link class the fit describes")
    protocol: Literal["ll", "ll128", "simple", "auto"] = Field(description="protocol; auto = all protocols (for p2p: "
                                                                        "NCCL's own LL/Simple choice)")
    path: ChannelPath = Field(default="collective", description="collective: ring/tree channels (all_reduce, all_gather, "
                        "reduce_scatter, broadcast, reduce); p2p: point-to-point channels (sendrecv, all_to_all)")
    latency_s: float = Field(ge=0, description="collective: ring base latency (replaces NCCL's baseLat, shifts other "
                             "algorithms); p2p: latency-regime intercept of one exchange (all hops included)")
    small_bw_Bps: float = Field(gt=0, description="per-rank link bandwidth seen by latency-regime messages")
    fill_latency_s: float = Field(description="intercept of the bandwidth regime (pipeline fill and drain)")
    bandwidth_Bps: float = Field(gt=0, description="effective per-rank link bandwidth at this protocol")
    curve: tuple[tuple[float, float], ...] = Field(
        default=(), description="p2p only, optional: measured (bytes per exchange, seconds) points; a one-node group "
                                "interpolates them instead of the two lines (the p2p time is concave in the size)")


class Calibration(BaseModel):
    """A set of fitted entries plus where they came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: str = Field(default="", description="profile or machine the fit was made on")
    source: str = Field(default="", description="measurement files and tool versions")
    entries: tuple[CalibrationEntry, ...] = Field(default=(), description="fitted link parameters")

    def lookup(self, link_class: str, protocol: str, path: str = "collective") -> CalibrationEntry | None:
        """The entry for a link class, protocol and path (an exact protocol wins over ``auto``); None if absent
        (a p2p lookup never falls back to a collective entry: an all-reduce fit cannot pin down p2p channels)."""
        mine = [e for e in self.entries if e.link_class == link_class and e.path == path]
        exact = [e for e in mine if e.protocol == protocol]
        if exact:
            return exact[0]
        auto = [e for e in mine if e.protocol == "auto"]
        return auto[0] if auto else None


def calibration_system_problem(calibration: Calibration, node_name: str) -> str | None:
    """Why ``calibration`` should not be applied to node profile ``node_name`` (None when it may): a fit names the
    profile it was measured on as the first word of ``system:`` (``h200_x2 (2x H200 SXM ...)``); link parameters
    fitted on one machine are wrong on another (an H200 fit makes DGX H100 TP collectives ~34% faster)."""
    measured = calibration.system.split(" ", 1)[0].split("(", 1)[0].strip()
    if not measured or measured == node_name:
        return None
    return f"calibration was measured on {measured!r}, not on {node_name!r}"


def check_calibration_system(calibration: Calibration, node_name: str, file: str | None,
                             force: bool) -> str | None:
    """Raise :class:`UserError` when ``calibration`` was measured on another system, unless ``force``: then return
    the warning to print (None when the systems match)."""
    problem = calibration_system_problem(calibration, node_name)
    if problem is None:
        return None
    if not force:
        raise UserError(f"{problem} (--force-calibration or system.force_calibration: true applies it anyway)",
                        file=file, key_path="system")
    return f"{file}: {problem}; applied because it was forced"


def calibration_to_yaml(calibration: Calibration) -> str:
    """YAML text of a calibration (SI units, keys as in :class:`CalibrationEntry`)."""
    import yaml

    data = calibration.model_dump(mode="json")
    data["entries"] = [{k: v for k, v in e.items() if k != "curve" or v} for e in data["entries"]]
    return yaml.safe_dump(data, sort_keys=False)


@memo(maxsize=16, loaded=True)
def calibration_of(path: str) -> Calibration:
    """The calibration file at ``path``, read once per path (sweeps and searches over one scenario share it)."""
    return load_calibration(path)


#: top-level keys of a scenario that a calibration file never has (a scenario named where a calibration belongs)
SCENARIO_KEYS = frozenset({"name", "model", "parallel", "training", "serving", "moe", "search", "sweep", "extends"})
#: what a calibration file holds, for a message about a file that is not one
CALIBRATION_SHAPE = ("A calibration file (what `simulator calibrate` writes; system.calibration and --calibration name "
                     "one) has `system:` (the node profile it was measured on, a name), `source:` (the logs and tool "
                     "versions) and `entries:`, a list of fits with link_class, protocol, path, latency_s, "
                     "fill_latency_s and bandwidth_Bps (docs/interface.md, `simulator calibrate`)")


def load_calibration(path_or_dict: str | Path | dict) -> Calibration:
    """Read a calibration YAML (or an already-parsed dict); user mistakes raise :class:`UserError` with the file,
    line and key path (the same reader as profiles and scenarios)."""
    from simulator.yamlio import LocatedYaml, read_yaml, validation_error_to_user_error

    located = LocatedYaml(path_or_dict, {}, None) if isinstance(path_or_dict, dict) else read_yaml(path_or_dict)
    if not isinstance(located.data, dict):
        raise UserError("a calibration must be a YAML mapping (written by `simulator calibrate`)", file=located.file)
    unknown = [str(k) for k in located.data if k not in Calibration.model_fields]
    if unknown:
        scenario = bool(SCENARIO_KEYS & set(located.data)) or isinstance(located.data.get("system"), dict)
        raise UserError(f"this file was read as a calibration file{', but it is a scenario' if scenario else ''}: "
                        f"{', '.join(unknown)} {'is not a calibration key' if len(unknown) == 1 else 'are not calibration keys'}. "
                        + CALIBRATION_SHAPE, file=located.file, key_path=unknown[0],
                        line=located.line_of(unknown[0]))
    try:
        return Calibration.model_validate(located.data)
    except ValidationError as err:
        raise validation_error_to_user_error(err, file=located.file, located=located) from None
