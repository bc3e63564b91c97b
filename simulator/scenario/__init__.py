"""Scenario files: the YAML a user writes, validated and resolved into the simulator's inputs."""

from simulator.scenario.load import Scenario, load_scenario

__all__ = ["Scenario", "load_scenario"]
