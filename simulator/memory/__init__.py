"""Per-GPU memory per pipeline stage: model states, activations, buffers (issue 4).

Imports ``simulator.plan`` and ``simulator.model`` only.
"""

from simulator.memory.activations import ActContext, layer_activation_bytes, layer_activation_items
from simulator.memory.estimate import estimate_memory
from simulator.memory.items import BUCKETS, MemoryItem, MemoryReport, StageMemory
from simulator.plan.params import padded_vocab, stage_params
from simulator.plan.pipeline import in_flight
from simulator.plan.recipe import sharding_stage

__all__ = [
    "BUCKETS", "ActContext", "MemoryItem", "MemoryReport", "StageMemory", "estimate_memory",
    "in_flight", "layer_activation_bytes", "layer_activation_items",
    "padded_vocab",
    "sharding_stage", "stage_params",
]
