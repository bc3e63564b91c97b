"""Model architectures: specs, presets, Hugging Face config import, parameter and FLOP counts.

Imports only ``simulator.units`` and ``simulator.errors`` (the import graph of tests/test_code_quality.py).
"""

from simulator.model.flops import (
    GemmOp,
    LayerFlops,
    expert_mlp_ops,
    hardware_flops,
    korthikanti_hardware_flops_selective,
    korthikanti_model_flops,
    layer_flops,
    layer_kinds,
    logits_flops,
    model_flops,
    narayanan_full_recompute_flops,
)
from simulator.model.hf_config import load_hf_config
from simulator.model.params import (
    ParamTensor,
    embedding_params,
    head_params,
    layer_params,
    local_numel,
    param_counts,
)
from simulator.model.presets import load_model_preset, preset_names
from simulator.model.shape import RankShape
from simulator.model.spec import MLASpec, ModelSpec, MoESpec

__all__ = [
    "GemmOp", "LayerFlops", "MLASpec", "ModelSpec", "MoESpec", "ParamTensor", "embedding_params",
    "expert_mlp_ops", "hardware_flops", "head_params", "korthikanti_hardware_flops_selective", "korthikanti_model_flops",
    "layer_flops", "layer_kinds", "layer_params", "load_hf_config", "load_model_preset", "local_numel", "logits_flops",
    "model_flops", "narayanan_full_recompute_flops", "param_counts", "preset_names", "RankShape",
]
