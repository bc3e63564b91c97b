"""What a framework or serving engine really runs, as configuration: the serving engine's choices
(:class:`ServingConfig`: kernel set, attention and expert kernels, all-to-all backend, CUDA graphs, the workload it
serves), the MoE backends as registered objects (:mod:`simulator.implementation.moe_backends`) and the ``moe:``
section (:class:`MoeSettings`: backend, routing, permute chain, grouped or sequential experts, overlap). Imports units
and hardware only; plan, the cost models, serving and scenario read it."""

from simulator.implementation.moe_settings import DEFAULT_MOE_SETTINGS, MoeSettings
from simulator.implementation.serving import ServingConfig

__all__ = ["DEFAULT_MOE_SETTINGS", "MoeSettings", "ServingConfig"]
