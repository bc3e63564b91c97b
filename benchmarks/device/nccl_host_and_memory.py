"""Two costs of NCCL collectives outside their bus time, on two GPUs of one node (run under torchrun):

* host: seconds of CPU time to issue one eager ``torch.distributed`` collective (ProcessGroupNCCL: work object,
  stream sync events, the NCCL launch) against one plain CUDA kernel launch, measured while a sleep kernel keeps
  the GPU busy so the host never waits: N calls back to back, time.perf_counter around the loop;
* memory: device memory NCCL takes outside PyTorch's allocator, read from cudaMemGetInfo (free memory) minus
  PyTorch's reserved memory, after the communicator's first use of each collective (NCCL connects its channels
  and allocates their buffers lazily, per collective kind).

NVLink SHARP stays off (NCCL_NVLS_ENABLE=0, as the device requires).

    torchrun --nproc-per-node 2 benchmarks/device/nccl_host_and_memory.py --out nccl.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def outside_torch_bytes() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def issue_time(fn, calls: int) -> float:
    """Host seconds per call of ``fn`` issued ``calls`` times behind a sleep kernel (the GPU stays busy)."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))      # ~1 s of GPU time at H200 clocks: longer than the loop below
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    rows = []

    def log(row):
        row = {**row, "rank": rank, "world": world}
        rows.append(row)
        print(json.dumps(row), flush=True)

    x = torch.ones(1 << 18, device="cuda")            # 1 MiB fp32
    gathered = torch.empty(world * x.numel(), device="cuda")
    small = torch.ones(4096, device="cuda")
    torch.cuda.synchronize()
    log({"kind": "env", "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
         "gpu": torch.cuda.get_device_name(), "nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
         "outside_torch_before_init": outside_torch_bytes()})
    dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
    torch.cuda.synchronize()
    log({"kind": "memory", "after": "init_process_group", "outside_torch": outside_torch_bytes()})
    steps = [("all_reduce", lambda: dist.all_reduce(x)),
             ("all_gather", lambda: dist.all_gather_into_tensor(gathered, x)),
             ("reduce_scatter", lambda: dist.reduce_scatter_tensor(x[: x.numel() // world], x)),
             ("all_to_all", lambda: dist.all_to_all_single(gathered, gathered)),
             ("send_recv", lambda: dist.batch_isend_irecv(
                 [dist.P2POp(dist.isend, small, (rank + 1) % world), dist.P2POp(dist.irecv, small.clone(),
                                                                                 (rank - 1) % world)])[0].wait())]
    for name, fn in steps:
        fn()
        torch.cuda.synchronize()
        dist.barrier()
        log({"kind": "memory", "after": name, "outside_torch": outside_torch_bytes()})
    group = dist.new_group(list(range(world)))
    dist.all_reduce(x, group=group)
    torch.cuda.synchronize()
    log({"kind": "memory", "after": "second communicator all_reduce", "outside_torch": outside_torch_bytes()})
    # host issue cost: eager collectives vs a plain kernel, medians of 5 rounds
    for name, fn in (("add_kernel", lambda: small.add_(1.0)),
                     ("all_reduce_16KiB", lambda: dist.all_reduce(small)),
                     ("all_reduce_1MiB", lambda: dist.all_reduce(x))):
        times = []
        for _ in range(5):
            dist.barrier()
            times.append(issue_time(fn, args.calls))
        log({"kind": "host", "op": name, "host_s": statistics.median(times), "rounds": times})
    if rank == 0:
        with open(args.out, "w") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
