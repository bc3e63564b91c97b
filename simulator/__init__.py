"""Analytical cost model for distributed LLM training: per-GPU memory per pipeline stage and step time.

``simulator.load_scenario(path_or_dict)`` validates a scenario; ``simulator.simulate(scenario)`` predicts.
The package import stays light: those two are imported on first use, and pandas/matplotlib only by the
functions that draw or tabulate.
"""

__version__ = "0.1.0"
__all__ = ["load_scenario", "simulate"]


def __getattr__(name: str):
    if name == "load_scenario":
        from simulator.scenario import load_scenario

        return load_scenario
    if name == "simulate":
        from simulator.entries import simulate

        return simulate
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
