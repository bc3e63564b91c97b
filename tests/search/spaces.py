"""Small plan spaces several search tests share: the 22B model (scenarios/korthikanti_22b.yaml) with every sharding,
recompute and offload choice, under Megatron and under PyTorch."""

from __future__ import annotations

from pathlib import Path

from simulator.scenario.document import read_document

ROOT = Path(__file__).resolve().parents[2]


def megatron_space():
    """22B (scenarios/korthikanti_22b.yaml), every sharding, recompute and offload choice (Megatron: optimizer and
    activation offload), tp 4 and 8, pp 1, 2 and 4, vpp 1 and 2, micro-batches 1 and 2, 1F1B and ZB-H1, global
    batch 6 (micro-batch 2 at dp 2 does not divide it; 3 micro-batches are not a multiple of interleaved pp 2)."""
    data = read_document(ROOT / "scenarios" / "korthikanti_22b.yaml").data
    data.pop("parallel")
    data["training"] = {**data["training"], "global_batch": 6}
    data["search"] = {"tp": [4, 8], "pp": [1, 2, 4], "vpp": [1, 2], "micro_batch": [1, 2],
                      "schedule": ["1f1b", "zb1p"]}
    return data


def pytorch_space():
    """The same space under framework pytorch (ZeRO 1-3, optimizer offload needs a ZeRO stage, ZeRO-Infinity's
    parameter offload needs ZeRO 3) with global batch 8."""
    data = megatron_space()
    data["training"] = {**data["training"], "framework": "pytorch", "precision": "amp_bf16", "global_batch": 8}
    return data
