"""The whole training run for people: days, goodput, where the time goes, checkpoints, energy, cost."""

from __future__ import annotations

from simulator.report.table import render_markdown, render_table
from simulator.units import GB

HOUR = 3600.0


def run_rows(run: dict) -> tuple[list[str], list[list[object]]]:
    """Where the wall time goes (``run.time_s``): hours and share."""
    wall = run["wall_s"]
    rows = [[name, round(seconds / HOUR, 1), f"{seconds / wall:.1%}"] for name, seconds in run["time_s"].items()]
    rows.append(["wall", round(wall / HOUR, 1), "100.0%"])
    return ["part", "hours", "share"], rows


def render_run(run: dict, fmt: str = "text") -> str:
    """``Result.to_dict()["run"]`` as a title line, the time table and a checkpoint / energy / cost summary."""
    table = render_markdown if fmt == "markdown" else render_table
    ck = run["checkpoint"]
    lines = [table(*run_rows(run), title=f"whole run: {run['tokens']:.3g} tokens in {run['steps']:,.0f} steps, "
                                         f"{run['days']:.1f} days, goodput {run['goodput']:.1%}, "
                                         f"{run['interruptions']:.1f} interruptions expected (one every "
                                         f"{run['mtbf_s'] / HOUR:.1f} h)"),
             f"checkpoint ({ck['mode']}): {ck['bytes'] / GB:,.0f} GB every {ck['interval_s'] / 60:.1f} min of "
             f"training, stall {ck['stall_s']:.2f} s, write {ck['write_s']:.1f} s; restart "
             f"{run['restart_s']['total'] / 60:.1f} min",
             f"GPU-hours {run['gpu_hours']:,.0f}; energy {run['energy_MWh']:,.1f} MWh "
             f"({run['tokens_per_J']:.3g} tokens/J)"
             + (f"; cost {run['cost']:,.0f}" if run["cost"] is not None else "")
             + (f"; {run['carbon_t']:,.0f} t CO2e" if run["carbon_t"] is not None else "")]
    mc = run.get("monte_carlo")
    if mc:
        lines.append(f"Monte Carlo ({mc['samples']} runs): days p10 {mc['wall_s']['p10'] / 86400:.2f}, mean "
                     f"{mc['wall_s']['mean'] / 86400:.2f}, p90 {mc['wall_s']['p90'] / 86400:.2f}; interruptions "
                     f"p10 {mc['interruptions']['p10']:.0f}, p90 {mc['interruptions']['p90']:.0f}")
    return "\n".join(lines)
