"""Plain-PyTorch training steps measured on 2x H200 (data/h200x2_train) against the memory and step-time model.

Each measured run becomes a scenario: the same GPT (``framework: pytorch``, ``precision: amp_bf16``, Adam), one
replica per GPU, DDP with its default overlap of gradient all-reduce and backward.
"""

from __future__ import annotations

import json

from simulator import load_scenario, simulate

MEMORY_TOLERANCE = 0.05


def measured_runs() -> list[dict]:
    from simulator.validation import VALIDATION_DATA

    text = (VALIDATION_DATA / "h200x2_train" / "train_steps.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def scenario_for(run: dict) -> dict:
    """The scenario of one measured run."""
    c, world = run["config"], run["world"]
    return {
        "name": f"pytorch-gpt-L{c['layers']}-h{c['hidden']}-x{world}",
        "system": {"profile": "h200_x2", "nodes": 1, "gpus": world},
        "model": {"name": "plain-pytorch-gpt", "layers": c["layers"], "hidden": c["hidden"], "heads": c["heads"],
                  "ffn_hidden": c["ffn"], "vocab": c["vocab"], "activation": "gelu", "norm": "layernorm",
                  "linear_bias": True, "position_embedding": "learned", "max_position": c["seq"],
                  "tied_embeddings": False},
        "parallel": {"dp": world, "overlap_grad_reduce": True},
        "training": {"seq_len": c["seq"], "micro_batch": c["micro_batch"], "global_batch": c["micro_batch"] * world,
                     "precision": "amp_bf16", "framework": "pytorch", "optimizer": "adam"},
    }


def pytorch_rows() -> list[dict]:
    """Measured vs predicted peak memory and step time for every run."""
    out = []
    for run in measured_runs():
        result = simulate(load_scenario(scenario_for(run)))
        c = run["config"]
        out.append({"run": f"L{c['layers']} h{c['hidden']} b{c['micro_batch']} s{c['seq']} x{run['world']} GPU",
                    "params": run["params"], "measured_GiB": run["peak_allocated_bytes"] / 2**30,
                    "predicted_GiB": result.memory.peak_bytes / 2**30,
                    "memory_error": result.memory.peak_bytes / run["peak_allocated_bytes"] - 1,
                    "measured_ms": run["step_s_median"] * 1e3, "predicted_ms": result.step.step_s * 1e3,
                    "time_error": result.step.step_s / run["step_s_median"] - 1})
    return out
