"""``simulate_serving(scenario)``: prefill/decode step times, TTFT/TPOT/throughput and the concurrency curve of a
scenario with a ``serving:`` section (docs/serving.md)."""

from __future__ import annotations

from simulator.compute.efficiency import default_efficiency
from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.scenario.load import Scenario
from simulator.scenario.simulate import _calibration, topology_of
from simulator.serving import ServeResult, serve
from simulator.serving.backends import EXPERT_KERNELS
from simulator.serving.step import StepContext


def simulate_serving(scenario: Scenario) -> ServeResult:
    """Predict the serving scenario (its ``serving:`` section is required)."""
    if scenario.serving is None:
        raise UserError("simulator serve needs a serving: section (batch, input_len, output_len; docs/serving.md)",
                        file=scenario.file, key_path="serving")
    kernel = EXPERT_KERNELS[scenario.serving.expert_kernel]
    dtype = scenario.plan.recipe.gemm_dtype
    if scenario.model.moe is not None and kernel.fp8_only and not dtype.startswith("fp8"):
        raise UserError(f"expert_kernel {scenario.serving.expert_kernel} runs fp8 weights; training.precision gives "
                        f"{dtype} GEMMs (precision: fp8, or expert_kernel: triton_fused / cutlass_grouped)",
                        file=scenario.file, key_path="serving.expert_kernel")
    gpu = scenario.cluster.node.gpu
    memory = estimate_memory(scenario.plan, hbm_capacity_bytes=gpu.memory.capacity)
    calibration = _calibration(scenario.calibration_path) if scenario.calibration_path else None
    ctx = StepContext(model=scenario.model, gpu=gpu, eff=default_efficiency(gpu.architecture),
                      serving=scenario.serving, moe_settings=scenario.moe, topology=topology_of(scenario.cluster),
                      calibration=calibration)
    p = scenario.parallel
    header = {"scenario": scenario.name,
              "system": {"profile": scenario.cluster.node.name, "nodes": scenario.cluster.nodes, "gpus": scenario.gpus},
              "model": scenario.model.name,
              "parallel": {"tp": p.tp, "pp": p.pp, "dp": scenario.plan.dp, "ep": p.ep, "etp": p.etp},
              "serving": scenario.serving.model_dump(mode="json")}
    return serve(ctx, scenario.plan, memory, header, notes=tuple(scenario.plan.notes) + tuple(scenario.notes))
