"""The memory features of issue 28 item 3 against peaks measured on one H200 (data/h200_memory_features/, measured
with benchmarks/device/memory_features.py: plain-PyTorch realisations of each framework's behaviour).

Each measured case becomes the scenario a user would write for it: the script's GPT (LayerNorm, no biases, learned
positions, untied head; GeLU, or SwiGLU for the FP8 input store) on one H200, and

* ``amp``: ``framework: pytorch``, ``precision: amp_bf16`` (``exp_avg_dtype`` / ``exp_avg_sq_dtype: bf16`` for
  the bf16 moments);
* ``mcore``: ``framework: megatron``, ``precision: bf16``, ``cross_entropy: unfused``, and the feature's key:
  ``exp_avg_dtype`` / ``exp_avg_sq_dtype``, ``store_param_remainders``, ``parallel.cpu_offloading_num_layers``,
  ``activation_func_fp8_input_store``, ``parallel.deallocate_pipeline_outputs`` (pp 2 on two GPUs);
* ``fsdp2``: ``framework: torchtitan``, ``zero: 3``, ``precision: amp_bf16`` (torchtitan's loop on one rank).

The two-stage pipeline ran both stages on the one GPU, so its peak is neither stage's: that pair is checked on the
difference the flag makes, measured (peak with the outputs kept - peak with them freed) against the model's
difference on stage 0 (the stage that sends; the last stage's output is the loss), and its pinned peak is the
measured peak with deallocation plus the model's difference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from simulator.entries.simulate import simulate
from simulator.scenario.load import load_scenario
from simulator.validation import VALIDATION_DATA

DATA = VALIDATION_DATA / "h200_memory_features" / "memory_features.jsonl"
INTERLEAVED = DATA.parent / "interleaved_peak.jsonl"
"""benchmarks/device/interleaved_peak.py: Megatron's interleaved 1F1B on two ranks sharing one GPU, one line per rank."""
TOLERANCE = 0.05
TIMED_STEPS = 8
"""Cases timed over this many steps after a warm-up carry their step time (the others' optimizers are Python
loops over slices, a realisation of the memory layout, not of the speed)."""


def measured_runs() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def feature_of(c: dict) -> str:
    """The feature (scenario key) a case exercises, or ``baseline``."""
    if c["case"] == "fsdp2":
        return "framework: torchtitan (FSDP2 loop)"
    if c["pp"] > 1:
        return "parallel.deallocate_pipeline_outputs: " + ("true" if c["dealloc"] else "false")
    if c["offload"]:
        return f"parallel.cpu_offloading_num_layers: {c['offload']}"
    if c["fp8_store"]:
        return "training.activation_func_fp8_input_store"
    if c["remainders"]:
        return "training.store_param_remainders (+ bf16 moments)"
    if c["moments"] != "fp32":
        return f"training.exp_avg_dtype / exp_avg_sq_dtype: {c['moments']}"
    return "baseline"


def scenario_for(run: dict) -> dict:
    """The scenario of one measured case (module docstring)."""
    c = run["config"]
    pp = c["pp"]
    model = {"name": f"gpt-L{c['layers']}-h{c['hidden']}", "layers": c["layers"], "hidden": c["hidden"],
             "heads": c["heads"], "ffn_hidden": c["ffn"], "vocab": c["vocab"], "activation": c["activation"],
             "norm": "layernorm", "linear_bias": False, "position_embedding": "learned", "max_position": c["seq"],
             "tied_embeddings": False}
    parallel: dict = {"dp": 1}
    training = {"seq_len": c["seq"], "micro_batch": c["micro_batch"],
                "global_batch": c["micro_batch"] * c["microbatches"], "optimizer": "adam"}
    if c["moments"] != "fp32":
        training |= {"exp_avg_dtype": c["moments"], "exp_avg_sq_dtype": c["moments"]}
    if c["case"] == "amp":
        training |= {"framework": "pytorch", "precision": "amp_bf16"}
    elif c["case"] == "fsdp2":
        training |= {"framework": "torchtitan", "precision": "amp_bf16"}
        parallel["zero"] = 3
    else:
        training |= {"framework": "megatron", "precision": "bf16", "cross_entropy": "unfused"}
        training |= {"store_param_remainders": True} if c["remainders"] else {}
        training |= {"activation_func_fp8_input_store": True} if c["fp8_store"] else {}
        parallel |= {"cpu_offloading_num_layers": c["offload"]} if c["offload"] else {}
        parallel |= {"pp": pp, "deallocate_pipeline_outputs": c["dealloc"]} if pp > 1 else {}
    return {"name": f"{c['case']}-{feature_of(c)}", "system": {"profile": "h200_x2", "nodes": 1, "gpus": pp},
            "model": model, "parallel": parallel, "training": training}


@dataclass(frozen=True)
class FeatureRow:
    case: str                  # amp / mcore / fsdp2 and the shape
    feature: str
    measured_bytes: float
    predicted_bytes: float
    measured_s: float
    predicted_s: float
    note: str = ""

    @property
    def error(self) -> float:
        return self.predicted_bytes / self.measured_bytes - 1.0


def _shape(c: dict) -> str:
    return (f"{c['case']} L{c['layers']} h{c['hidden']} {c['activation']} b{c['micro_batch']} s{c['seq']}"
            + (f" pp{c['pp']} m{c['microbatches']}" if c["pp"] > 1 else ""))


def feature_rows() -> list[FeatureRow]:
    """Every measured case against its scenario's predicted peak (the pipeline pair by difference)."""
    rows, pipeline = [], {}
    for run in measured_runs():
        c = run["config"]
        result = simulate(load_scenario(scenario_for(run)))
        if c["pp"] > 1:
            pipeline[c["dealloc"]] = (run, result.memory.stages[0].peak)
            continue
        timed = c["steps"] >= TIMED_STEPS    # the timed cases: fused AdamW and torchtitan's loop
        note = (f"step {run['step_s_median'] * 1e3:.1f} ms, model {result.step.step_s * 1e3:.1f} ms "
                f"({result.step.step_s / run['step_s_median'] - 1:+.1%})" if timed else "")
        rows.append(FeatureRow(_shape(c), feature_of(c), run["peak_allocated_bytes"], result.memory.peak_bytes,
                               run["step_s_median"], result.step.step_s, note))
    rows += interleaved_rows()
    if len(pipeline) == 2:
        (kept, kept_stage0), (freed, freed_stage0) = pipeline[False], pipeline[True]
        model_delta = kept_stage0 - freed_stage0
        measured_delta = kept["peak_allocated_bytes"] - freed["peak_allocated_bytes"]
        rows.append(FeatureRow(_shape(kept["config"]), feature_of(kept["config"]), kept["peak_allocated_bytes"],
                               freed["peak_allocated_bytes"] + model_delta, kept["step_s_median"], float("nan"),
                               f"kept - freed: measured {measured_delta / 2**20:.1f} MiB, model (stage 0) "
                               f"{model_delta / 2**20:.1f} MiB"))
    return rows


def interleaved_scenario(c: dict) -> dict:
    """The scenario of an interleaved_peak.py run: Megatron layout, pp x vpp, its micro-batches."""
    return {"name": f"interleaved-pp{c['pp']}-vpp{c['vpp']}", "system": {"profile": "h200_x2", "nodes": 1, "gpus": c["pp"]},
            "model": {"name": f"gpt-L{c['layers']}-h{c['hidden']}", "layers": c["layers"], "hidden": c["hidden"],
                      "heads": c["heads"], "ffn_hidden": c["ffn"], "vocab": c["vocab"], "activation": "gelu",
                      "norm": "layernorm", "linear_bias": False, "position_embedding": "learned",
                      "max_position": c["seq"], "tied_embeddings": False},
            "parallel": {"pp": c["pp"], "vpp": c["vpp"], "dp": 1},
            "training": {"seq_len": c["seq"], "micro_batch": c["micro_batch"],
                         "global_batch": c["micro_batch"] * c["microbatches"], "optimizer": "adam",
                         "framework": "megatron", "precision": "bf16", "cross_entropy": "unfused"}}


def interleaved_rows() -> list[FeatureRow]:
    """Each rank's measured peak against the model's peak of its stage (the in-flight count of the interleaved
    schedule: docs/memory_features.md, "Pipeline stage outputs and the interleaved in-flight count")."""
    if not INTERLEAVED.exists():
        return []
    out = []
    for line in INTERLEAVED.read_text().splitlines():
        run = json.loads(line)
        c = run["config"]
        stage = simulate(load_scenario(interleaved_scenario(c))).memory.stages[run["rank"]]
        out.append(FeatureRow(f"mcore L{c['layers']} h{c['hidden']} b{c['micro_batch']} s{c['seq']} pp{c['pp']} "
                              f"vpp{c['vpp']} m{c['microbatches']} rank {run['rank']}",
                              "interleaved 1F1B in-flight count", run["peak_allocated_bytes"], stage.peak,
                              float("nan"), float("nan")))
    return out
