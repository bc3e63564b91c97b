"""NCCL's device memory on two H200s (data/h200x2_nccl, NCCL 2.28.9) against :mod:`simulator.memory.nccl`.

The measurement reads, on rank 0, device memory outside PyTorch's pool after each step of one process: the
communicator's init, its first all-reduce (all-gather and reduce-scatter then add nothing), its first
all-to-all (send/recv then adds nothing), and a second communicator's first all-reduce. The model's state after
each step is the process constant plus what each communicator has connected by then. Two of the four figures
are what :data:`~simulator.memory.nccl.PROCESS_BYTES` and :data:`~simulator.memory.nccl.COMM_EXTRA_BYTES` were
fitted to; the all-to-all is not fitted, and init alone is not modelled (the model charges from init on the
186 MiB the first collective adds beyond its connections). The measurement ran with NCCL_NVLS_ENABLE=0 (the device
requires it), so the communicators below hold no NVLS buffers.
"""

from __future__ import annotations

import json

from simulator.hardware.loader import load_cluster
from simulator.memory.nccl import (
    PROCESS_BYTES,
    Communicator,
    NcclFabric,
    communicator_bytes,
)
from simulator.units.constants import MiB


def measured_steps() -> dict[str, float]:
    """Rank 0's device memory outside PyTorch after each step, minus before the process group (bytes)."""
    from simulator.validation import VALIDATION_DATA

    rows = [json.loads(line) for line in (VALIDATION_DATA / "h200x2_nccl" / "nccl.jsonl").read_text().splitlines()
            if line.strip()]
    base = next(r["outside_torch_before_init"] for r in rows if r["kind"] == "env" and r["rank"] == 0)
    return {r["after"]: r["outside_torch"] - base for r in rows if r["kind"] == "memory" and r["rank"] == 0}


def nccl_rows() -> list[dict]:
    """Measured vs modelled cumulative NCCL bytes (and the step's increment) after each step, in MiB."""
    fabric = NcclFabric.of(load_cluster("h200_x2"))
    ring = communicator_bytes(Communicator("first", 2, 1, 2, ring=True), fabric)
    both = communicator_bytes(Communicator("first", 2, 1, 2, ring=True, peers=1), fabric)
    model = {"all_reduce": PROCESS_BYTES + ring, "all_to_all": PROCESS_BYTES + both,
             "second communicator all_reduce": PROCESS_BYTES + both + ring}
    measured = measured_steps()
    out, last_m, last_p = [], 0.0, 0.0
    for step, predicted in model.items():
        m = measured[step]
        out.append({"after": step, "measured_MiB": m / MiB, "predicted_MiB": predicted / MiB,
                    "step_measured_MiB": (m - last_m) / MiB, "step_predicted_MiB": (predicted - last_p) / MiB,
                    "fitted": step != "all_to_all"})
        last_m, last_p = m, predicted
    return out
