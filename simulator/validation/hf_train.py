"""Hugging Face Transformers and timm training steps on one H200 against the model with the ``hf_transformers``
implementation profile (docs/implementation_profiles.md): step time and peak allocated memory of every measured case
of simulator/validation/data/h200_hf/ (benchmarks/device/hf_train.py, hf_trainer.py).

Each case is the scenario a user writes: one H200, the model's published dims, ``framework: hf_transformers``
(``hf_trainer`` for the Trainer rows), ``precision: pure_bf16`` (bf16 parameters, gradients and AdamW moments: the
plain loop's torch.optim.AdamW keeps its state in the parameters' dtype; ``amp_bf16`` for ViT and the Trainer,
which keep fp32 parameters), ``recompute: full`` for ``gradient_checkpointing_enable()``, ``recompute: selective`` with
``selective_ac_option: op`` for torchtitan's per-op policy on every decoder layer (``sac.jsonl``; its re-run ops
and host constants: simulator/program/op_sac.py, fitted on the Qwen2.5-0.5B rows only). The profile's host
constants and the optimizer's bandwidth were fitted on Qwen2.5 rows (``CALIBRATION``): the Llama-3.2-1B, OLMoE and
ViT rows validate them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simulator.entries.simulate import simulate
from simulator.scenario.load import load_scenario

DATA = Path(__file__).parent / "data" / "h200_hf"
FILES = ("train.jsonl", "trainer.jsonl")
#: torchtitan's op-level selective checkpointing applied to the HF layers (benchmarks/device/hf_sac.py)
SAC_FILES = ("sac.jsonl",)

#: dims from each model's config.json on the Hugging Face Hub (benchmarks/device/hf_common.py CONFIGS)
MODELS = {
    "qwen2.5-0.5b": dict(layers=24, hidden=896, heads=14, kv_heads=2, ffn_hidden=4864, vocab=151936,
                         activation="swiglu", norm="rmsnorm", tied_embeddings=True, qkv_bias=True),
    "llama-3.2-1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64, ffn_hidden=8192, vocab=128256,
                         activation="swiglu", norm="rmsnorm", tied_embeddings=True),
    "qwen2.5-1.5b": dict(layers=28, hidden=1536, heads=12, kv_heads=2, ffn_hidden=8960, vocab=151936,
                         activation="swiglu", norm="rmsnorm", tied_embeddings=True, qkv_bias=True),
    "olmoe-1b-7b": dict(layers=16, hidden=2048, heads=16, ffn_hidden=1024, vocab=50304, activation="swiglu",
                        norm="rmsnorm", tied_embeddings=False, qk_norm=True,
                        moe=dict(experts=64, top_k=8, expert_ffn_hidden=1024)),
    # a bidirectional encoder priced as a 197-token transformer with a 1000-way head on every token (approximate)
    "vit_base_patch16_224": dict(layers=12, hidden=768, heads=12, ffn_hidden=3072, vocab=1000, activation="gelu",
                                 norm="layernorm", linear_bias=True, position_embedding="learned", max_position=197,
                                 tied_embeddings=False),
}
#: models whose rows fitted the hf_transformers profile's host constants and optimizer bandwidth
CALIBRATION = ("qwen2.5-0.5b", "qwen2.5-1.5b")


def scenario_for(run: dict, framework: str | None = None) -> dict:
    """The scenario mapping of one measured case (module docstring); ``framework`` replaces the profile (e.g.
    ``pytorch`` for the priced-before-profiles baseline)."""
    name, section = run["model"], run["section"]
    vit, trainer = section == "vit", section == "trainer"
    mb, seq = (run["batch"], 197) if vit else (run["micro_batch"], run["seq"])
    ckpt = run.get("checkpointing")
    label = f"{name} {mb}x{seq}" + (" op-SAC" if ckpt == "op_sac" else " ckpt" if ckpt else "")
    if section == "moe":
        label += f" experts={run.get('experts_applied')}"
    label += " Trainer" if trainer else ""
    profile = framework or ("hf_trainer" if trainer else
                            "hf_per_expert_loop" if run.get("experts_applied") == "eager" else "hf_transformers")
    scenario = {"name": label.replace(" ", "-"), "system": {"profile": "h200_x2", "nodes": 1, "gpus": 1},
            "model": dict(MODELS[name], name=name),
            "parallel": ({"dp": 1, "recompute": "selective", "selective_ac_option": "op"} if ckpt == "op_sac" else
                         {"dp": 1, "recompute": "full" if ckpt else "none"}),
            "training": {"seq_len": seq, "micro_batch": mb, "global_batch": mb, "optimizer": "adam",
                         "precision": "amp_bf16" if vit or trainer else "pure_bf16", "framework": profile}}
    if vit and framework is None:   # timm's Attention has one qkv Linear and its Mlp one fc1 (vision_transformer.py)
        scenario["implementation"] = {"separate_projections": False}
    return scenario


@dataclass(frozen=True)
class TrainRow:
    case: str
    model: str
    kind: str                   # train, host_probe, sac
    measured_s: float
    predicted_s: float
    host_s: float               # the model's host wait in the step
    measured_bytes: float
    predicted_bytes: float

    @property
    def time_error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def memory_error(self) -> float:
        return self.predicted_bytes / self.measured_bytes - 1.0

    @property
    def calibration(self) -> bool:
        return self.model in CALIBRATION


def measured_runs(files: tuple[str, ...] = FILES) -> list[dict]:
    runs = [json.loads(line) for f in files for line in (DATA / f).read_text().splitlines() if line.strip()]
    return [r for r in runs if r.get("section") in ("dense", "moe", "vit", "trainer", "sac") and "step_s_median" in r]


def train_rows(framework: str | None = None, files: tuple[str, ...] = FILES) -> list[TrainRow]:
    """Every measured training case priced (``framework``: see :func:`scenario_for`)."""
    rows = []
    for run in measured_runs(files):
        scenario = scenario_for(run, framework)
        result = simulate(load_scenario(scenario))
        rows.append(TrainRow(scenario["name"], run["model"], "sac" if run["section"] == "sac" else
                             "train" if run["section"] == "trainer" else run["case"],
                             run["step_s_median"], result.step.step_s, result.step.host_s,
                             run["peak_allocated_bytes"], result.memory.peak_bytes))
    return rows
