"""The window a data-parallel collective in the background hides behind (simulator.schedule.costs.dp_window): compute
(+ recompute in a backward), plus the exposed communication that stays inside the NVLink domain when the collective
itself crosses the network; and which exposed seconds count as inside the domain."""

from simulator.pricing.groups import OpTiming
from simulator.pricing.overlap import exposed
from simulator.schedule.costs import Cost, _comm_cost, dp_window
from simulator.traffic import CommOp


def test_window_by_hand():
    cost = Cost(compute=1.0, recompute=0.5, exposed_intra=0.3)
    assert dp_window(cost, on_network=True) == 1.8
    assert dp_window(cost, on_network=False) == 1.5
    assert dp_window(cost, on_network=True, backward=False) == 1.3
    # a 1.7 s gather over the network: hidden behind 1.8 s, none of it exposed but the interference of 2 channels
    # on 132 SMs; over NVLink it would overrun 1.5 s of compute by 0.2 s
    assert exposed(1.7, dp_window(cost, True), 2 / 132) == 1.7 * 2 / 132
    assert abs(exposed(1.7, dp_window(cost, False), 0.0) - 0.2) < 1e-12


def test_links_inside_the_domain():
    assert not OpTiming(1.0, "ring/simple", "nvlink").on_network
    assert not OpTiming(1.0, "ring/simple", "pcie_p2p").on_network
    assert OpTiming(1.0, "ring/simple", "ib").on_network
    assert OpTiming(1.0, "deepep_normal/ibgda", "rdma").on_network


class _Timer:
    """A stand-in GroupTimer: each op's call time and link by its name."""

    def __init__(self, timings: dict[str, OpTiming]):
        self.timings = timings

    def time(self, op: CommOp, stage: int) -> OpTiming:
        return self.timings[op.name]


def test_only_intra_domain_exposure_is_counted():
    """An exposed NVLink TP call (0.4 s) and an exposed IB PP-like call (0.25 s) in one layer: exposed 0.65 s, of
    which 0.4 s inside the domain; a 0.3 s NVLink call hidden behind a 0.1 s window exposes 0.2 s, all inside."""
    ops = [CommOp("tp", "tp", "all_reduce", 1e6, 1, "layer_fwd", "none", "tp out"),
           CommOp("cp", "cp", "all_gather", 1e6, 1, "layer_fwd", "none", "over ib"),
           CommOp("tp", "tp", "all_gather", 1e6, 1, "layer_fwd", "gemm", "hidden tp")]
    timer = _Timer({"tp out": OpTiming(0.4, "ring/simple", "nvlink"), "over ib": OpTiming(0.25, "ring/simple", "ib"),
                    "hidden tp": OpTiming(0.3, "ring/simple", "nvlink", interference=0.0)})
    cost = Cost()
    _comm_cost(ops, timer, 0, {"gemm": 0.1, "none": 0.0}, cost)
    assert abs(cost.exposed["tp"] - 0.6) < 1e-12 and abs(cost.exposed["cp"] - 0.25) < 1e-12
    assert abs(cost.exposed_intra - 0.6) < 1e-12
