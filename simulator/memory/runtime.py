"""Device memory outside the tensors the model accounts: the CUDA context and libraries, and what the caching
allocator keeps reserved beyond the live tensors. Measured on one H200 (torch 2.11, CUDA 13.0) over a 10-step
training loop of a 16-layer GPT (simulator/validation/data/h200_memory/memory.jsonl,
benchmarks/device/train_memory.py).

- Runtime (context, cuBLAS workspaces, kernels): device memory used outside PyTorch's pool, 0.75 GiB in all seven
  configurations (the bare CUDA context is 0.61 GiB of it).
- Allocator cache: reserved minus allocated at the steady peak, median 0.77 GiB over the six configurations
  without ``expandable_segments`` (0.41-1.0 GiB; two runs with one micro-batch and ``set_to_none=True`` kept 8.8-9.0
  GiB cached from the first step, whose optimizer-state creation interleaves with freed activations; with
  ``expandable_segments:True`` 0.38 GiB).
NCCL's communicator buffers are not included here: :mod:`simulator.memory.nccl` counts them per plan.
"""

from __future__ import annotations

from simulator.units.constants import GiB

RUNTIME_BYTES = 0.75 * GiB
"""Device memory outside the framework's allocator: CUDA context, libraries, workspaces (measured, H200)."""
CUDA_CONTEXT_BYTES = 0.61 * GiB
"""The bare CUDA context, part of :data:`RUNTIME_BYTES` (measured, H200): what a process holds before it loads
kernels and libraries."""
ALLOCATOR_CACHE_BYTES = 0.77 * GiB
"""Reserved but unallocated memory of the caching allocator at the peak (median measured, H200)."""
