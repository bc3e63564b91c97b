"""Failures: the job's interruption rate from its component counts and the cost of a restart.

Units: failures per second, seconds (docs/whole_run.md, "Failures"). Sources live in data/failure_rates.yaml.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from simulator.caching import memo
from simulator.errors import UserError
from simulator.hardware.cluster import ClusterSpec
from simulator.scenario.run_section import FailureSection, RestartSection
from simulator.wholerun.units import DAY
from simulator.yamlio import LocatedYaml, read_yaml

TABLE = Path(__file__).parent / "data" / "failure_rates.yaml"
COMPONENTS = ("gpu", "host", "nic", "switch", "software")
RESTART_PARTS = ("reschedule", "init", "nccl_init", "warmup")
#: an NCCL release, MAJOR.MINOR[.PATCH]
VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


@memo(maxsize=1, loaded=True)
def table() -> dict:
    """The sourced defaults: ``rates_per_day`` (each ``{value, source}``) and ``restart_s`` (each ``{value,
    source}``, but ``nccl_init``: ``{base, quadratic}``, see :func:`nccl_init_s`), checked by :func:`check_table`."""
    located = read_yaml(TABLE)
    check_table(located)
    return located.data


def check_table(located: LocatedYaml) -> None:
    """Every number of the failure table finite and >= 0 (GPU counts >= 1), every NCCL release a quoted
    MAJOR.MINOR[.PATCH]; else a UserError naming the file, the line and the key (exit 2)."""
    for name in COMPONENTS:
        _number(located, f"rates_per_day.{name}.value", 0.0)
    for name in RESTART_PARTS:
        if name != "nccl_init":
            _number(located, f"restart_s.{name}.value", 0.0)
    _number(located, "restart_s.nccl_init.base.seconds", 0.0)
    _number(located, "restart_s.nccl_init.base.gpus", 1.0)
    _version(located, "restart_s.nccl_init.default_nccl_version")
    terms = _at(located.data, "restart_s.nccl_init.quadratic")
    if not isinstance(terms, list):
        _fail(located, "restart_s.nccl_init.quadratic", f"must be a list of {{seconds, gpus, until_nccl}} (empty for "
                                                         f"none), got {terms!r}")
    for i in range(len(terms)):
        _number(located, f"restart_s.nccl_init.quadratic.{i}.seconds", 0.0)
        _number(located, f"restart_s.nccl_init.quadratic.{i}.gpus", 1.0)
        _version(located, f"restart_s.nccl_init.quadratic.{i}.until_nccl")


def _at(data: object, key_path: str) -> object:
    """The value at a dotted key path (list items by index), None where it is missing."""
    for part in key_path.split("."):
        if isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            data = data.get(part) if isinstance(data, dict) else None
    return data


def _fail(located: LocatedYaml, key_path: str, rule: str) -> None:
    raise UserError(rule, file=located.file, line=located.line_of(key_path), key_path=key_path)


def _number(located: LocatedYaml, key_path: str, minimum: float) -> None:
    value = _at(located.data, key_path)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        _fail(located, key_path, f"must be a finite number >= {minimum:g}, got {value!r}")


def _version(located: LocatedYaml, key_path: str) -> None:
    value = _at(located.data, key_path)
    if not isinstance(value, str) or not VERSION.fullmatch(value):
        _fail(located, key_path, f"must be an NCCL release as a quoted MAJOR.MINOR[.PATCH] string, got {value!r}")


def release(version: str) -> tuple[int, ...]:
    """``"2.28.7"`` -> ``(2, 28, 7)``; a missing patch is 0 (``"2.28"`` -> ``(2, 28, 0)``)."""
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


def nccl_init_s(gpus: int, nccl_version: str | None = None) -> float:
    """Seconds to set up NCCL's communicator over the job's ``gpus`` (docs/whole_run.md, "Restart"): the measured
    one-node time plus each measured O(N^2) part that the job's NCCL still has (``nccl_version`` below the part's
    ``until_nccl``; None: the table's default release), scaled by (N / its rank count)^2 (NVIDIA/nccl#1789: ring
    building and transport set-up looped over all pairs of ranks until NCCL 2.28.7)."""
    form = table()["restart_s"]["nccl_init"]
    job = release(nccl_version or form["default_nccl_version"])
    return form["base"]["seconds"] + sum(term["seconds"] * (gpus / term["gpus"]) ** 2 for term in form["quadratic"]
                                         if job < release(term["until_nccl"]))


def component_counts(cluster: ClusterSpec, gpus: int) -> dict[str, int]:
    """How many of each component the job depends on: its GPUs, its nodes (host and software), their NICs, and the
    switches of the two-level Clos its NICs use (:func:`clos_switches`); none on one node."""
    node = cluster.node
    nodes = math.ceil(gpus / node.gpus)
    nics = nodes * (node.nics.count if node.nics else 0)
    fabric = cluster.effective_fabric
    switches = clos_switches(nics, fabric.leaf_ports, fabric.oversubscription) if nodes > 1 and fabric else 0
    return {"gpu": gpus, "host": nodes, "nic": nics, "switch": switches, "software": nodes}


def clos_switches(nics: int, leaf_ports: int, oversubscription: float) -> int:
    """Leaf and spine switches of a two-level Clos for ``nics`` ports: a leaf gives ``leaf_ports x o / (1 + o)``
    ports to nodes and the rest up (``o``: down-link to up-link ratio); the spines terminate every up-link."""
    down = max(1, math.floor(leaf_ports * oversubscription / (1 + oversubscription)))
    leaves = math.ceil(nics / down)
    if leaves <= 1:
        return leaves
    return leaves + math.ceil(leaves * (leaf_ports - down) / leaf_ports)


def failure_rate_per_s(counts: dict[str, int], section: FailureSection) -> float:
    """The job's interruption rate, 1/s: sum over components of count x rate (independent exponential failures:
    any one stops a synchronous job). Rates per day from the section, else the table."""
    defaults = table()["rates_per_day"]
    total = 0.0
    for name in COMPONENTS:
        rate = getattr(section.rates, name)
        total += counts[name] * (defaults[name]["value"] if rate is None else rate)
    return total / DAY


@dataclass(frozen=True)
class RestartCost:
    """Seconds from a failure to training again, by part."""

    reschedule_s: float
    init_s: float
    nccl_init_s: float
    load_s: float
    warmup_s: float

    @property
    def total_s(self) -> float:
        return self.reschedule_s + self.init_s + self.nccl_init_s + self.load_s + self.warmup_s


def restart_cost(section: RestartSection, failures: FailureSection, load_s: float, gpus: int) -> RestartCost:
    """The restart's parts for a job of ``gpus`` GPUs (overrides, else the table; NCCL's set-up by
    :func:`nccl_init_s`): hot spares replace the wait for the scheduler by a swap (the reschedule part is dropped);
    in-job recovery keeps the processes (no re-initialisation)."""
    defaults = {k: v["value"] for k, v in table()["restart_s"].items() if k != "nccl_init"}
    defaults["nccl_init"] = nccl_init_s(gpus, section.nccl_version)

    def part(name: str) -> float:
        value = getattr(section, f"{name}_s")
        return defaults[name] if value is None else value

    reschedule = 0.0 if failures.hot_spares > 0 else part("reschedule")
    init = 0.0 if failures.in_job_recovery else part("init")
    return RestartCost(reschedule, init, part("nccl_init"), load_s, part("warmup"))
