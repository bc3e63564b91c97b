"""Scenario files: the YAML a user writes, validated and resolved into the simulator's inputs."""

from simulator.scenario.load import Scenario, SystemSection, load_scenario
from simulator.scenario.simulate import Result, simulate

__all__ = ["Result", "Scenario", "SystemSection", "load_scenario", "simulate"]
