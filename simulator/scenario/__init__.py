"""Scenario files: the YAML a user writes, validated and resolved into the simulator's inputs (the entries in
:mod:`simulator.entries`, :mod:`simulator.search` and :mod:`simulator.multimodal` take a loaded scenario)."""

from simulator.scenario.load import Scenario, SystemSection, load_scenario

__all__ = ["Scenario", "SystemSection", "load_scenario"]
