"""The whole training run (issue 31): time to train, checkpoints, failures and restarts, goodput, energy and cost.

Above the step (schedule) and memory engines, below the entries: ``whole_run(section, plan, cluster, gpus, memory,
stages)`` (docs/whole_run.md).
"""

from simulator.wholerun.run import WholeRun, run_steps, whole_run

__all__ = ["WholeRun", "run_steps", "whole_run"]
