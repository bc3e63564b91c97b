"""Shipped hardware profiles: they load, and their numbers agree with the datasheets."""

import pytest

from simulator.hardware import TENSOR_DTYPES, list_profiles, load_gpu, load_node
from simulator.units import GB, GiB, MiB

GPUS = list_profiles("gpus")
NODES = list_profiles("nodes")


def test_every_issue_profile_ships():
    assert {"rtx3090", "a100_sxm4_40gb", "a100_sxm4_80gb", "h100_sxm5", "h200_sxm"} <= set(GPUS)
    assert {"dgx_a100_80gb", "dgx_a100_40gb", "dgx_h100", "hgx_h200", "rtx3090_x4_pcie", "rtx3090_x2_nvlink",
            "h200_x2"} <= set(NODES)


@pytest.mark.parametrize("name", GPUS)
def test_stated_tensor_peaks_match_sm_level_counts_within_1_percent(name):
    gpu = load_gpu(name)
    checked = 0
    for dtype, stated in gpu.stated_dense_peaks.items():
        if dtype in TENSOR_DTYPES:
            derived = gpu.sms * gpu.sm.dense_flops_per_clock[dtype] * gpu.clocks.tensor_peak
            assert derived == pytest.approx(stated, rel=0.01), dtype
            checked += 1
    assert checked >= 4
    assert gpu.source


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("a100_sxm4_80gb", "bf16", 312),      # A100 whitepaper Table 1
        ("a100_sxm4_40gb", "tf32", 156),
        ("a100_sxm4_80gb", "int8", 624),
        ("h100_sxm5", "bf16", 989.4),         # H100 whitepaper Table 3 (1830 MHz)
        ("h100_sxm5", "fp8", 1978.9),
        ("h200_sxm", "bf16", 989.4),
        ("rtx3090", "bf16", 71),              # GA102 whitepaper: FP32 accumulate on GeForce
        ("rtx3090", "tf32", 35.6),
    ],
)
def test_derived_peaks_match_datasheets(name, dtype, tflops):
    assert load_gpu(name).dense_peak_flops(dtype) / 1e12 == pytest.approx(tflops, rel=0.01)


def test_rtx3090_counts_from_the_seed_notes():
    gpu = load_gpu("rtx3090")
    assert (gpu.die.gpcs, gpu.die.tpcs_per_gpc, gpu.die.sms_per_tpc) == (7, 6, 2)
    assert gpu.die.sms == 84 and gpu.sms == 82
    assert gpu.sm.processing_blocks == 4 and gpu.sm.fp32_cores == 128
    assert gpu.sm.register_file_bytes == 256 * 1024 and gpu.sm.l1_shared_bytes == 128 * 1024
    assert gpu.dense_peak_flops("fp16") * gpu.fp16_accumulate_speedup / 1e12 == pytest.approx(142, rel=0.01)
    assert gpu.sparse_peak_flops("bf16") == 2 * gpu.dense_peak_flops("bf16")


def test_memory_and_links():
    h200 = load_gpu("h200_sxm")
    assert h200.memory.bandwidth == 4800 * GB
    assert load_gpu("a100_sxm4_80gb").memory.capacity == 80 * GiB
    assert load_gpu("h100_sxm5").nvlink.total_Bps == 450 * GB
    assert load_gpu("a100_sxm4_40gb").nvlink.total_Bps == 300 * GB
    assert load_gpu("h100_sxm5").pcie.bandwidth_Bps == pytest.approx(63.0e9, rel=0.001)  # Gen5 x16
    assert load_gpu("a100_sxm4_80gb").pcie.bandwidth_Bps == pytest.approx(31.5e9, rel=0.001)  # Gen4 x16


@pytest.mark.parametrize("name", NODES)
def test_every_node_profile_loads(name):
    node = load_node(name)
    assert node.gpus >= 2 and node.source


def test_dgx_a100_wiring_matches_the_whitepaper():
    node = load_node("dgx_a100_80gb")
    assert node.nvswitch.count == 6 and node.nvswitch.links_per_gpu == [2] * 6 and not node.nvswitch.nvls
    assert len(node.pcie.complexes) == 4 and node.pcie.switch_levels == 2
    assert all(len(c.gpus) == 2 and len(c.nics) == 2 for c in node.pcie.complexes)
    assert node.cpu.numa_domains == 8 and node.nics.count == 8 and node.nics.bandwidth == 25 * GB


def test_dgx_h100_wiring():
    node = load_node("dgx_h100")
    assert node.nvswitch.links_per_gpu == [5, 4, 4, 5] and node.nvswitch.nvls
    assert node.nics.bandwidth == 50 * GB and node.pcie.generation == 5


def test_h200_capacity_is_what_the_driver_reports():
    """Issue 27: 143,771 MiB (nvidia-smi memory.total on the H200s lent to this project, driver 580.159.04), not the
    datasheet's 141 GB (131.3 GiB, 7% less), which is kept beside it."""
    memory = load_gpu("h200_sxm").memory
    assert memory.capacity == 143_771 * MiB
    assert memory.datasheet_capacity == 141 * GB
    assert "143771 MiB" in memory.capacity_source
    assert load_gpu("h100_sxm5").memory.capacity == 81_559 * MiB


def test_every_shipped_gpu_names_the_source_of_its_capacity():
    """Each shipped profile cites an nvidia-smi output for its capacity, or says why it keeps the datasheet's."""
    for name in list_profiles("gpus"):
        memory = load_gpu(name).memory
        assert memory.datasheet_capacity is not None, name
        source = memory.capacity_source
        assert source.startswith(("nvidia-smi", "measured: nvidia-smi")) or (
            source.startswith("datasheet:") and memory.capacity == memory.datasheet_capacity), (name, source)
