"""Compute capability compares as numbers: a 10.0 (Blackwell) GPU is newer than 9.0 and keeps NVLS."""

import pytest

from simulator.collectives import collective_table
from simulator.collectives.place import NVLS_MIN_COMPUTE_CAPABILITY, place_group
from simulator.hardware import ClusterSpec, load_gpu, load_node
from simulator.topology import Topology


def _hgx_with(compute_capability: str, architecture: str):
    node = load_node("dgx_h100")
    gpu = load_gpu("h100_sxm5").model_copy(update={"compute_capability": compute_capability,
                                                   "architecture": architecture})
    return Topology(ClusterSpec(node=node.model_copy(update={"gpu": gpu}), nodes=1))


@pytest.mark.parametrize(("cc", "version"), [("8.0", (8, 0)), ("9.0", (9, 0)), ("10.0", (10, 0)), ("12.1", (12, 1))])
def test_version_is_a_number_pair(cc, version):
    assert load_gpu("h100_sxm5").model_copy(update={"compute_capability": cc}).compute_capability_version == version


def test_blackwell_10_0_keeps_nvls():
    assert "10.0" < "9.0"  # the string comparison that used to drop NVLS on Blackwell
    assert (10, 0) >= NVLS_MIN_COMPUTE_CAPABILITY
    placement = place_group(_hgx_with("10.0", "blackwell"), list(range(8)))
    assert placement.nvls is True and placement.gpu_arch == "sm100"
    rows = collective_table(placement, "all_reduce", [2**30], algo="nvls")
    assert rows[0]["algorithm"] == "nvls" and rows[0]["time_us"] > 0


def test_ampere_8_0_on_an_nvswitch_has_no_nvls():
    placement = place_group(_hgx_with("8.0", "ampere"), list(range(8)))
    assert placement.nvls is False and placement.gpu_arch == "sm80"
