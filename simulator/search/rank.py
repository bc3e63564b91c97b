"""Ranking valid plans by an objective, and why the winner beats the runner-up."""

from __future__ import annotations

from typing import Any

from simulator.traffic import DIMS

#: objective -> (row column, True when larger is better)
OBJECTIVES = {"step_time": ("step_s", False), "tokens_per_s_per_gpu": ("tokens_per_s_per_gpu", True),
              "days": ("run_days", False), "cost": ("run_cost", False), "energy": ("run_energy_MWh", False)}

#: the columns that describe a plan (the deterministic tie-break, and what the tables print)
PLAN_KEYS = ("gpus", "tp", "pp", "vpp", "cp", "ulysses", "ep", "dp", "sp", "schedule", "split", "tp_comm_overlap",
             "offload", "recompute", "recompute_modules", "sharding", "micro_batch")

#: the step's breakdown terms (seconds on the critical stage; they add up to the step time)
TERMS = ("compute_s", "recompute_s", "bubble_s", "optimizer_s", "host_s", "offload_s",
         *(f"exposed_{d}_s" for d in DIMS))


def plan_key(row: dict[str, Any]) -> tuple:
    return tuple(str(row[k]) for k in PLAN_KEYS)


def rank(rows: list[dict[str, Any]], objective: str) -> list[dict[str, Any]]:
    """Rows best first (ties broken by the plan's values, so every executor gives one order); adds ``rank``."""
    column, larger = OBJECTIVES[objective]
    ordered = sorted(rows, key=lambda r: (-r[column] if larger else r[column], plan_key(r)))
    return [{"rank": i + 1, **r} for i, r in enumerate(ordered)]


def why(winner: dict[str, Any], runner_up: dict[str, Any]) -> str:
    """One line: the plans' differing values and the breakdown term that differs most between them."""
    diff = [f"{k} {runner_up[k]} -> {winner[k]}" for k in PLAN_KEYS if winner[k] != runner_up[k]]
    term = max(TERMS, key=lambda t: abs(runner_up[t] - winner[t]))
    delta = runner_up[term] - winner[term]
    gap = runner_up["step_s"] - winner["step_s"]
    name = term.removesuffix("_s").replace("_", " ")
    return (f"#1 beats #2 by {gap * 1e3:.1f} ms per step ({', '.join(diff) or 'same plan values'}): "
            f"the largest difference is {name}, {runner_up[term]:.3f} s -> {winner[term]:.3f} s "
            f"({'-' if delta >= 0 else '+'}{abs(delta) * 1e3:.1f} ms)")
