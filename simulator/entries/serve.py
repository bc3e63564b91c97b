"""``simulate_serving(scenario)``: prefill/decode step times, TTFT/TPOT/throughput and the concurrency curve of a
scenario with a ``serving:`` section (docs/serving.md)."""

from __future__ import annotations

from pathlib import Path

from simulator.compute.efficiency import default_efficiency
from simulator.errors import UserError
from simulator.hardware.calibration import calibration_of
from simulator.memory import MemoryReport
from simulator.memory.inference import inference_memory
from simulator.scenario.draft import draft_model_of
from simulator.scenario.load import Scenario
from simulator.serving import ServeResult, serve
from simulator.serving.backends import EXPERT_KERNELS
from simulator.serving.bench import bench
from simulator.serving.loop_inputs import loop_costs, loop_limits
from simulator.serving.rate import closed_loop_point
from simulator.serving.speculative import iteration, with_draft
from simulator.serving.step import StepContext, kv_window
from simulator.topology import topology_of


def serving_context(scenario: Scenario) -> tuple[StepContext, MemoryReport]:
    """The step context (GPU, efficiency, serving settings, topology, calibration, draft model) and the serving
    memory of ``scenario``: what every serving entry point and the engine validation start from."""
    gpu = scenario.cluster.node.gpu
    calibration = calibration_of(scenario.calibration_path) if scenario.calibration_path else None
    ctx = StepContext(model=scenario.model, gpu=gpu, eff=default_efficiency(gpu.architecture),
                      serving=scenario.serving, moe_settings=scenario.moe, topology=topology_of(scenario.cluster),
                      calibration=calibration, draft_model=draft_model_of(scenario.serving, scenario.file))
    # a serving plan's memory (estimate_memory's inference branch) with the engine's sliding-window pages
    memory = inference_memory(scenario.plan, gpu.memory.capacity, window=kv_window(ctx))
    return ctx, with_draft(ctx, scenario.plan, memory)


def simulate_closed_loop(scenario: Scenario, concurrency: int, num_requests: int) -> dict:
    """``vllm bench serve --max-concurrency C --num-prompts N --request-rate inf`` of the scenario's workload through
    the serving loop (simulator/serving/rate.py ``closed_loop_point``): throughput and latency percentiles."""
    ctx, memory = serving_context(scenario)
    rp = scenario.plan
    return closed_loop_point(concurrency, num_requests, replicas=rp.dp, gpus=rp.world_size,
                             input_len=scenario.serving.input_len, output_len=scenario.serving.output_len,
                             costs=loop_costs(ctx, rp), limits=loop_limits(ctx, rp, memory))


def simulate_bench(scenario: Scenario) -> dict:
    """``simulator serve --bench``: the scenario's request stream (``serving.workload``, ``serving.num_requests``)
    through the serving loop, measured as vLLM's and SGLang's benchmark scripts measure it
    (simulator/serving/bench.py)."""
    ctx, memory = serving_context(scenario)
    rp, s = scenario.plan, scenario.serving
    base = Path(scenario.file).parent if scenario.file else Path.cwd()
    return bench(s.workload, input_len=s.input_len, output_len=s.output_len, num_requests=s.num_requests,
                 replicas=rp.dp, base=base, costs=loop_costs(ctx, rp), limits=loop_limits(ctx, rp, memory))


def simulate_serving(scenario: Scenario) -> ServeResult:
    """Predict the serving scenario (its ``serving:`` section is required)."""
    if scenario.serving is None:
        raise UserError("simulator serve needs a serving: section (batch, input_len, output_len; "
                        "docs/serving/scenario.md)",
                        file=scenario.file, key_path="serving")
    kernel = EXPERT_KERNELS[scenario.serving.expert_kernel]
    dtype = scenario.plan.recipe.gemm_dtype
    if scenario.model.moe is not None and kernel.fp8_only and not dtype.startswith("fp8"):
        raise UserError(f"expert_kernel {scenario.serving.expert_kernel} runs fp8 weights; training.precision gives "
                        f"{dtype} GEMMs (precision: fp8, or expert_kernel: triton_fused / cutlass_grouped)",
                        file=scenario.file, key_path="serving.expert_kernel")
    ctx, memory = serving_context(scenario)
    p = scenario.parallel
    header = {"scenario": scenario.name,
              "system": {"profile": scenario.cluster.node.name, "nodes": scenario.cluster.nodes, "gpus": scenario.gpus},
              "model": scenario.model.name,
              "parallel": {"tp": p.tp, "pp": p.pp, "dp": scenario.plan.dp, "ep": p.ep, "etp": p.etp},
              "serving": scenario.serving.model_dump(mode="json")}
    if scenario.serving.speculative is not None:  # one iteration at batch and input_len (docs/speculative.md)
        s = scenario.serving
        header["speculative"] = iteration(ctx, scenario.plan, s.batch, s.input_len).to_dict()
    base = Path(scenario.file).parent if scenario.file else Path.cwd()
    return serve(ctx, scenario.plan, memory, header, notes=tuple(scenario.plan.notes) + tuple(scenario.notes),
                 base=base)
