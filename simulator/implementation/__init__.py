"""What a framework or serving engine really runs, as configuration: today the serving engine's choices
(:class:`ServingConfig`: kernel set, attention and expert kernels, all-to-all backend, CUDA graphs, the workload it
serves). Imports units and hardware only; plan, serving and scenario read it."""

from simulator.implementation.serving import ServingConfig

__all__ = ["ServingConfig"]
