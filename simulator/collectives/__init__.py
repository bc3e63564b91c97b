"""Collective communication cost models on a placed group of ranks (NCCL-style algorithms and protocols).

Public API: :class:`GroupPlacement` (what the group sees of the hardware), :func:`build_cost_model` /
:func:`evaluate` (build once, evaluate numpy size arrays), :func:`collective_table` (CLI rows),
:func:`calibrate` / :func:`load_calibration` (fit from nccl-tests logs), :func:`nic_message_time` (proxy vs IBGDA),
:func:`ring_pass` and :func:`all_to_all_matrix_time`. No matplotlib/pandas at import time.
"""

from simulator.collectives.coefficients import DEFAULT_COEFFICIENTS, Coefficients, format_coefficients
from simulator.collectives.fit import FileError, calibrate, fit_errors, format_errors
from simulator.collectives.model import (
    ALGORITHMS,
    OPS,
    Evaluation,
    GroupCostModel,
    build_cost_model,
    busbw_factor,
    evaluate,
    feasible_algorithms,
)
from simulator.collectives.nccl_logs import nccl_tuner_time, parse_nccl_tests, parse_tuning_table
from simulator.collectives.p2p import RingPass, all_to_all_matrix_time, nic_message_time, ring_pass
from simulator.collectives.place import place_group, placement_for_profile
from simulator.collectives.placement import GroupPlacement
from simulator.collectives.table import collective_table, format_table, plot_busbw
from simulator.hardware.calibration import (
    Calibration,
    CalibrationEntry,
    calibration_of,
    calibration_system_problem,
    calibration_to_yaml,
    check_calibration_system,
    load_calibration,
)

__all__ = [
    "ALGORITHMS", "OPS", "DEFAULT_COEFFICIENTS", "Calibration", "CalibrationEntry", "Coefficients",
    "Evaluation", "FileError", "GroupCostModel", "GroupPlacement", "RingPass", "all_to_all_matrix_time",
    "build_cost_model", "busbw_factor", "calibrate", "calibration_system_problem", "calibration_to_yaml",
    "check_calibration_system", "collective_table", "evaluate",
    "feasible_algorithms", "fit_errors", "format_coefficients", "format_errors", "format_table", "calibration_of", "load_calibration",
    "nccl_tuner_time", "nic_message_time", "parse_nccl_tests", "parse_tuning_table", "place_group", "placement_for_profile",
    "plot_busbw", "ring_pass",
]
