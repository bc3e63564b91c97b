"""Ranking plans by a whole-run figure (``simulator search --objective days|cost|energy``, docs/whole_run.md).

Each valid row gets its run under the scenario's ``run:`` section: its plan resolved again, the step's breakdown
read from the row (the terms add up to the step time), the saved state one GPU holds from the memory model's
bounding stages (only an async or in-memory checkpoint's stall reads it).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.memory.estimate import bounding_stages
from simulator.traffic import DIMS
from simulator.wholerun import whole_run
from simulator.wholerun.checkpoint import per_gpu_state_bytes
from simulator.wholerun.run import run_steps

#: objective -> the run's key it minimises
RUN_OBJECTIVES = {"days": "days", "cost": "cost", "energy": "energy_MWh"}
#: the columns a row gains (``run_`` + the run's JSON key); ``--json`` prints them as the plan's ``run`` object
RUN_COLUMNS = ("run_days", "run_gpu_hours", "run_cost", "run_energy_MWh", "run_goodput")


def _step(row: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(step_s=row["step_s"], compute_s=row["compute_s"], recompute_s=row["recompute_s"],
                           bubble_s=row["bubble_s"], optimizer_s=row["optimizer_s"], host_s=row["host_s"],
                           exposed_comm_s={d: row[f"exposed_{d}_s"] for d in DIMS})


def add_run_columns(rows: list[dict[str, Any]], ctx, resolve) -> list[dict[str, Any]]:
    """Rows with ``run_days``, ``run_cost``, ``run_energy_MWh`` and ``run_goodput`` (``resolve(ctx, row)`` gives a
    row's plan). A batch ramp is priced at the full batch's step here (the search varies the plan, not the batch)."""
    section = ctx.fixed.run
    if section is None:
        raise UserError("--objective days, cost or energy ranks by the whole run: the scenario needs a run: section "
                        "(docs/whole_run.md)", key_path="run")
    out = []
    for row in rows:
        rp = resolve(ctx, row)
        state = 0.0
        if section.checkpoint.mode != "sync":
            state = per_gpu_state_bytes(estimate_memory(rp, stages=bounding_stages(rp)))
        step = _step(row)
        stages = [(steps, step) for _, steps in run_steps(section, rp.training.global_batch, rp.training.seq_len)]
        run = whole_run(section, rp, ctx.fixed.cluster, row["gpus"], float(state), stages).to_dict()
        out.append({**row, **{column: run[column.removeprefix("run_")] for column in RUN_COLUMNS}})
    return out
