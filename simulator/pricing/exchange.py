"""Communication between arbitrary sets of GPUs, outside one plan's rank groups: pairs that exchange at once (the
token edges between the submodules of a multimodal plan) and one collective on a set of GPUs (a contrastive loss's
gathers over every submodule's last stage), and one sendrecv between two GPUs (a disaggregated serving K/V
hand-off). Priced by the same collectives model as :class:`GroupTimer`, on the placement the GPUs really occupy.
"""

from __future__ import annotations

from simulator.collectives import build_cost_model, evaluate, place_group
from simulator.topology import Topology


def pairs_exchange_s(topology: Topology, pairs: list[tuple[int, int]], bytes_per_pair: float) -> tuple[float, str]:
    """Seconds for every (src, dst) pair to send ``bytes_per_pair`` at once, and the links they use. Pairs inside a
    node go over NVLink, the others over the NICs: each class is priced as concurrent sendrecv groups sharing its
    links (:func:`simulator.collectives.place_group` with the class's other pairs as concurrent groups), the two
    classes at once (the slower sets the time). Link: ``nvlink``, ``network``, ``pcie``, or ``nvlink+network``
    when both classes are present."""
    pairs = [(a, b) for a, b in pairs if a != b]
    if not pairs or bytes_per_pair <= 0:
        return 0.0, "local"
    names = topology.gpus
    same = [p for p in pairs if topology.domain_of(names[p[0]]) == topology.domain_of(names[p[1]])]
    apart = [p for p in pairs if p not in same]
    times, links = [], []
    for group in (same, apart):
        if not group:
            continue
        groups = [list(p) for p in group]
        placement = place_group(topology, groups[0], concurrent_groups=groups[1:])
        times.append(float(evaluate(build_cost_model(placement), "sendrecv", [bytes_per_pair]).times_s[0]))
        link = set(topology.path(*group[0]).links)
        links.append("nvlink" if link <= {"nvlink"} else ("network" if {"ib", "eth"} & link else "pcie"))
    return max(times), "+".join(links)


def group_call_s(topology: Topology, gpus: list[int], op: str, nbytes: float) -> float:
    """One ``op`` of ``nbytes`` (nccl-tests convention) on ``gpus``; a group spread unevenly over nodes on its real
    split (:meth:`simulator.topology.Topology.on_real_split`)."""
    if len(gpus) < 2 or nbytes <= 0:
        return 0.0
    placement = place_group(topology.on_real_split(), gpus)
    return float(evaluate(build_cost_model(placement), op, [nbytes]).times_s[0])


def pair_call(topology: Topology, src: int, dst: int, nbytes: float, calibration=None) -> tuple[float, str, str]:
    """One sendrecv of ``nbytes`` between ranks ``src`` and ``dst`` (a disaggregated K/V hand-off): seconds, the
    algorithm/protocol the collectives model picks, and the link class (``nvlink`` inside an NVLink domain, else
    ``network``)."""
    placement = place_group(topology, [topology.gpus[src], topology.gpus[dst]])
    ev = evaluate(build_cost_model(placement, calibration=calibration), "sendrecv", [nbytes])
    link = "nvlink" if placement.n_nodes == 1 else "network"
    return float(ev.times_s[0]), f"{ev.algorithms[0]}/{ev.protocols[0]}", link
