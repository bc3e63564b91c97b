"""Failures: the job's interruption rate from its component counts and the cost of a restart.

Units: failures per second, seconds (docs/whole_run.md, "Failures"). Sources live in data/failure_rates.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from simulator.caching import memo
from simulator.hardware.cluster import ClusterSpec
from simulator.scenario.run_section import FailureSection, RestartSection
from simulator.wholerun.failure_table import FailureTable, parse_table
from simulator.wholerun.units import DAY
from simulator.yamlio import read_yaml

TABLE = Path(__file__).parent / "data" / "failure_rates.yaml"
COMPONENTS = ("gpu", "host", "nic", "switch", "software")


@memo(maxsize=1, loaded=True)
def table() -> FailureTable:
    """The sourced defaults (rates per component per day, the restart's parts; the schema and its rules in
    :mod:`simulator.wholerun.failure_table`): a bad entry exits 2 naming the file, the line, the key and the rule."""
    return parse_table(read_yaml(TABLE))


def release(version: str) -> tuple[int, ...]:
    """``"2.28.7"`` -> ``(2, 28, 7)``; a missing patch is 0 (``"2.28"`` -> ``(2, 28, 0)``)."""
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


def nccl_init_s(gpus: int, nccl_version: str | None = None) -> float:
    """Seconds to set up NCCL's communicator over the job's ``gpus`` (docs/whole_run.md, "Restart"): the measured
    one-node time plus each measured O(N^2) part that the job's NCCL still has (``nccl_version`` below the part's
    ``until_nccl``; None: the table's default release), scaled by (N / its rank count)^2 (NVIDIA/nccl#1789: ring
    building and transport set-up looped over all pairs of ranks until NCCL 2.28.7)."""
    form = table().restart_s.nccl_init
    job = release(nccl_version or form.default_nccl_version)
    return form.base.seconds + sum(term.seconds * (gpus / term.gpus) ** 2 for term in form.quadratic
                                   if job < release(term.until_nccl))


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
    defaults = table().rates_per_day
    total = 0.0
    for name in COMPONENTS:
        rate = getattr(section.rates, name)
        total += counts[name] * (getattr(defaults, name).value if rate is None else rate)
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
    parts = table().restart_s
    defaults = {"reschedule": parts.reschedule.value, "init": parts.init.value, "warmup": parts.warmup.value,
                "nccl_init": nccl_init_s(gpus, section.nccl_version)}

    def part(name: str) -> float:
        value = getattr(section, f"{name}_s")
        return defaults[name] if value is None else value

    reschedule = 0.0 if failures.hot_spares > 0 else part("reschedule")
    init = 0.0 if failures.in_job_recovery else part("init")
    return RestartCost(reschedule, init, part("nccl_init"), load_s, part("warmup"))
