"""Build a group's cost model once (tables of latency and per-byte terms), then evaluate it on numpy size arrays.

The split follows NCCL's tuning.cc: :class:`~simulator.collectives.coefficients.Coefficients` is the labelled
table, :func:`build_cost_model` fills per-(operation, algorithm, protocol) terms once per group, and
:func:`evaluate` is a few vectorized numpy lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.caching import memo
from simulator.collectives import algorithms as alg
from simulator.collectives import composite as comp
from simulator.collectives import custom_allreduce as custom
from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS, PROTOCOLS, Coefficients
from simulator.collectives.links import LinkParams, link_table, p2p_link_table
from simulator.collectives.placement import GroupPlacement
from simulator.errors import UserError
from simulator.hardware.calibration import Calibration

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
ALGORITHMS = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "hierarchical") + custom.CUSTOM_ALGORITHMS,
    "all_gather": ("ring", "pat", "nvls", "hierarchical"),
    "reduce_scatter": ("ring", "pat", "nvls", "hierarchical"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "all_to_all": ("direct", "hierarchical"),
    "sendrecv": ("direct",),
}
ALL_ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "hierarchical", "direct", "pat") + custom.CUSTOM_ALGORITHMS


def busbw_factor(op: str, n_ranks: int) -> float:
    """nccl-tests bus bandwidth factor (NVIDIA/nccl-tests doc/PERFORMANCE.md): busbw = algbw * factor."""
    if op == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n_ranks - 1) / n_ranks
    return 1.0


@dataclass(frozen=True)
class OpTable:
    """Terms of every (algorithm, protocol) row of one operation; infeasible rows carry a reason and inf terms."""

    op: str
    algorithms: tuple[str, ...]
    protocols: tuple[str, ...]
    reasons: tuple[str, ...]
    terms: np.ndarray  # (rows, 6): lat_small, inv_small, lat_big, inv_big, msgs_fixed, msgs_per_byte
    curves: tuple = ()  # per row: None or (Curve, wire, max bytes per exchange, s/B beyond it) (curves.py)
    fills: tuple = ()  # per row: None or (concurrent ops, s/B): NVLS all_reduce pipeline fill (algorithms.nvls)


@dataclass(frozen=True)
class GroupCostModel:
    """The built model of one placed group; evaluate it with :func:`evaluate`."""

    placement: GroupPlacement
    coefficients: Coefficients
    calibration: Calibration | None
    tables: dict[str, OpTable] = field(repr=False)
    seconds_per_message: float = 0.0
    p2p_links: dict[str, dict[str, LinkParams]] = field(default_factory=dict, repr=False)


def _infeasible(ctx: alg.Ctx, op: str, algo: str, proto: str) -> str:
    """Why (algo, proto) cannot run for op on this group, or ''."""
    return custom.row_problem(ctx.p, proto) if algo in custom.CUSTOM_ALGORITHMS else _nccl_infeasible(ctx, op, algo, proto)


def _nccl_infeasible(ctx: alg.Ctx, op: str, algo: str, proto: str) -> str:
    """Why NCCL's (algo, proto) cannot run for op on this group, or ''."""
    p = ctx.p
    if p.domain_ranks and (algo in ("pat", "hierarchical") or op == "all_to_all"):
        return (f"{algo} {op} needs the same number of ranks on every NVLink domain; this group has "
                f"{list(p.domain_ranks)}")
    if proto == "ll128" and op in ("all_to_all", "sendrecv"):
        return "NCCL point-to-point has no LL128 protocol"
    if proto == "ll128" and ctx.k > 1 and p.intra_transport != "nvlink":
        return f"LL128 needs NVLink between the GPUs of a node (NCCL enables it only there); this group uses {p.intra_transport}"
    if algo in ("nvls", "nvls_tree", "pat") and proto != "simple":
        return f"{algo} runs the Simple protocol only"
    if algo in ("nvls", "nvls_tree") and not p.nvls:
        return "NVLS needs NVSwitch gen3+ with NVLink SHARP (placement.nvls is false)"
    if algo == "nvls" and ctx.nodes > 1:
        return "multi-node NVLS needs IB SHARP (CollNet), not modelled; use nvls_tree"
    if algo in ("nvls", "nvls_tree") and ctx.k < 2:
        return "NVLS needs at least 2 ranks of the group on each NVSwitch"
    if algo == "nvls" and op != "all_reduce" and ctx.k > ctx.c.nvls_max_arity:
        return (f"NCCL runs NVLS {op} with at most {ctx.c.nvls_max_arity} ranks per NVLink domain "
                f"(NCCL_MAX_NVLS_ARITY); this group has {ctx.k}")
    if algo == "nvls_tree" and ctx.nodes < 2:
        return "nvls_tree spans nodes; this group is on one node (use nvls)"
    if algo == "pat" and (ctx.k != 1 or ctx.nodes < 2):
        return f"PAT needs one rank per node (NCCL_PAT_ENABLE auto rule); this group has {ctx.k} per node"
    if algo == "hierarchical" and (ctx.nodes < 2 or ctx.k < 2):
        return "hierarchical needs several nodes with several ranks each"
    return ""


def _row(ctx: alg.Ctx, op: str, algo: str, proto: str) -> alg.Row:
    if algo == "ring":
        return alg.chain(ctx, op, proto) if op in ("broadcast", "reduce") else alg.ring(ctx, op, proto)
    if algo == "tree":
        return alg.tree(ctx, proto)
    if algo == "nvls":
        return alg.nvls(ctx, op)
    if algo == "nvls_tree":
        return alg.nvls_tree(ctx)
    if algo == "pat":
        return alg.pat(ctx, op)
    if algo in custom.CUSTOM_ALGORITHMS:  # vLLM's kernels; the serving engines' own: simulator.collectives.custom_allreduce
        k = custom.KERNELS["vllm"]
        lat = k.one_shot_latency_s if algo == "one_shot" else k.two_shot_latency_s
        inv = custom.custom_time_s(k, ctx.p, algo, 1.0) - lat
        return alg.Row(algo, proto, lat, inv, lat, inv)
    if op == "all_to_all":
        return comp.all_to_all_direct(ctx, proto) if algo == "direct" else comp.all_to_all_hierarchical(ctx, proto)
    if op == "sendrecv":
        return comp.sendrecv(ctx, proto)
    return comp.hierarchical(ctx, op, proto)


def _table(ctx: alg.Ctx, op: str) -> OpTable:
    algos, protos, reasons, terms, curves, fills = [], [], [], [], [], []
    for algo in ALGORITHMS[op]:
        for proto in PROTOCOLS:
            reason = _infeasible(ctx, op, algo, proto) if ctx.n > 1 else ""
            algos.append(algo)
            protos.append(proto)
            reasons.append(reason)
            curves.append(None)
            fills.append(None)
            if reason:
                terms.append([np.inf] * 4 + [0.0, 0.0])
            elif ctx.n == 1:
                terms.append([0.0] * 6)
            else:
                r = _row(ctx, op, algo, proto)
                terms.append([r.lat_small_s, r.inv_small, r.lat_big_s, r.inv_big, r.msgs_fixed, r.msgs_per_byte])
                if r.curve is not None:
                    curves[-1] = (r.curve, r.curve_wire, r.curve_max_bytes, r.curve_over_inv)
                if r.fill_ops:
                    fills[-1] = (r.fill_ops, r.fill_inv)
    return OpTable(op, tuple(algos), tuple(protos), tuple(reasons), np.array(terms, dtype=float), tuple(curves),
                   tuple(fills))


def build_cost_model(placement: GroupPlacement, coefficients: Coefficients = DEFAULT_COEFFICIENTS,
                     calibration: Calibration | None = None) -> GroupCostModel:
    """Fill the per-(operation, algorithm, protocol) terms for one placed group.

    Models built with the default coefficients are cached by (placement, calibration): both are frozen, and
    sweeps meet the same group shapes over and over.
    """
    if coefficients is DEFAULT_COEFFICIENTS:
        return _cached_default_model(placement, calibration)
    return _build(placement, coefficients, calibration)


@memo(maxsize=4096, loaded=True)
def _cached_default_model(placement: GroupPlacement, calibration: Calibration | None) -> GroupCostModel:
    return _build(placement, DEFAULT_COEFFICIENTS, calibration)


def _build(placement: GroupPlacement, coefficients: Coefficients, calibration: Calibration | None) -> GroupCostModel:
    ctx = alg.Ctx(placement, coefficients, link_table(placement, coefficients, calibration),
                  p2p_link_table(placement, coefficients, calibration))
    tables = {op: _table(ctx, op) for op in OPS}
    rate = coefficients.message_rate_per_s[placement.net_issue]
    return GroupCostModel(placement, coefficients, calibration, tables, 1.0 / rate, ctx.p2p)


def _check_op(op: str) -> None:
    if op not in OPS:
        raise UserError(f"unknown operation {op!r}; accepted: {', '.join(OPS)}", key_path="op")


def row_times(model: GroupCostModel, op: str, sizes_bytes, fill: bool = True) -> np.ndarray:
    """Seconds for every row of ``op`` (shape rows x sizes); infeasible rows are inf. ``fill=False`` leaves out the
    NVLS pipeline fill (NCCL's tuner, which makes the choice, has no such term)."""
    _check_op(op)
    s = np.asarray(sizes_bytes, dtype=float)[None, :]
    t = model.tables[op].terms
    small = t[:, 0:1] + t[:, 1:2] * s
    big = t[:, 2:3] + t[:, 3:4] * s
    rate = t[:, 0:1] + (t[:, 4:5] + t[:, 5:6] * s) * model.seconds_per_message
    times = np.maximum(np.maximum(small, big), rate)
    for i, curve in enumerate(model.tables[op].curves):
        if curve is not None:
            m = curve[1] * s[0]
            times[i] = curve[0].time(m) + np.maximum(m - curve[2], 0.0) * curve[3]
    return _with_fill(model, op, s[0], times) if fill else times


def _with_fill(model: GroupCostModel, op: str, sizes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``times`` plus each NVLS / NVLS-tree row's pipeline fill (algorithms.nvls, nvls_tree)."""
    times = times.copy()
    c = model.coefficients
    for i, fill_terms in enumerate(model.tables[op].fills):
        if fill_terms is not None:
            ops, inv = fill_terms
            loop = (alg.nvls_loop_bytes(sizes, ops, c.nvls_chunk_bytes) if ops > 0 else
                    alg.nvls_tree_loop_bytes(sizes, -ops, min(c.nvls_chunk_bytes, c.nvls_tree_max_chunk_bytes(
                        model.placement.n_nodes))))
            times[i] += inv * np.minimum(loop, sizes)  # a buffer smaller than a loop is one (partial) loop
    return times


@dataclass(frozen=True)
class Evaluation:
    """Times (s) for each size and the (algorithm, protocol) that produced each."""

    op: str
    sizes_bytes: np.ndarray
    times_s: np.ndarray
    algorithms: tuple[str, ...]
    protocols: tuple[str, ...]


def _select(table: OpTable, algo: str, proto: str) -> np.ndarray:
    if algo != "auto" and algo not in ALL_ALGORITHMS:
        raise UserError(f"unknown algorithm {algo!r}; accepted: auto, {', '.join(ALL_ALGORITHMS)}", key_path="algo")
    if proto != "auto" and proto not in PROTOCOLS:
        raise UserError(f"unknown protocol {proto!r}; accepted: auto, {', '.join(PROTOCOLS)}", key_path="proto")
    if algo != "auto" and algo not in table.algorithms:
        raise UserError(f"{table.op} has no algorithm {algo!r}; accepted: auto, {', '.join(ALGORITHMS[table.op])}",
                        key_path="algo")
    # auto is NCCL's choice: the engines' custom kernels run only when named (or by an engine's rule)
    mask = np.array([(algo == a or algo == "auto" and a not in custom.CUSTOM_ALGORITHMS) and (proto in ("auto", p))
                     for a, p in zip(table.algorithms, table.protocols, strict=True)])
    feasible = mask & np.array([not r for r in table.reasons])
    if not feasible.any():
        reasons = sorted({f"{a}/{p}: {r}" for a, p, r, m in
                          zip(table.algorithms, table.protocols, table.reasons, mask, strict=True) if m and r})
        raise UserError(f"{table.op} with algo={algo} proto={proto} cannot run on this group: " + "; ".join(reasons),
                        key_path="algo")
    return feasible


def evaluate(model: GroupCostModel, op: str, sizes_bytes, algo: str = "auto", proto: str = "auto") -> Evaluation:
    """Time of ``op`` on the group for each size, picking the fastest feasible (algorithm, protocol) unless forced
    (fastest by NCCL's tuner terms: the NVLS pipeline fill prices the choice but does not make it).

    Raises UserError when the forced combination cannot run here (with every reason).
    """
    _check_op(op)
    table = model.tables[op]
    sizes = np.asarray(sizes_bytes, dtype=float)
    feasible = _select(table, algo, proto)
    # NCCL picks with its tuner's model (tuning.cc, no pipeline fill), then the chosen row runs with its fill
    tuner = row_times(model, op, sizes, fill=False)
    tuner[~feasible, :] = np.inf
    times = _with_fill(model, op, sizes, tuner) if any(table.fills) else tuner
    best = np.argmin(tuner, axis=0)
    chosen = times[best, np.arange(sizes.size)]
    if model.placement.n_ranks == 1:
        return Evaluation(op, sizes, np.zeros_like(sizes), ("none",) * sizes.size, ("none",) * sizes.size)
    return Evaluation(op, sizes, chosen, tuple(table.algorithms[i] for i in best),
                      tuple(table.protocols[i] for i in best))


def feasible_algorithms(model: GroupCostModel, op: str) -> tuple[str, ...]:
    """Algorithms of ``op`` with at least one feasible protocol on this group."""
    _check_op(op)
    t = model.tables[op]
    return tuple(dict.fromkeys(a for a, r in zip(t.algorithms, t.reasons, strict=True) if not r))
