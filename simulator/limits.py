"""Documented resource limits (docs/errors.md): inputs beyond them are refused with a user error before any work,
so that no input can hang the simulator or exhaust memory. Each bound is far above any real job."""

from __future__ import annotations

#: largest YAML file read (scenarios, profiles and calibrations are a few KiB)
MAX_YAML_BYTES = 1 << 20
#: largest nccl-tests log `simulator calibrate` reads: nccl-tests prints one "#  Rank N Group 0 Pid ... device N
#: [0x..] NVIDIA ..." line of ~90 bytes per rank, about 12 MiB at MAX_GPUS ranks, plus ~130 bytes per size
MAX_LOG_BYTES = 16 << 20
#: largest PyTorch profiler (Kineto) trace `simulator calibrate --trace` reads, as JSON text (a gzip file counts
#: after decompression): one training step of a 1B-parameter model with record_shapes is ~10-40 MiB; json.loads
#: takes ~1 s and ~10x the text in memory per 100 MiB
MAX_TRACE_BYTES = 256 << 20
#: data lines (sizes) of one nccl-tests log: a doubling sweep (-f 2) from 1 B to 1 PiB has 51, a stepped one (-i)
#: of 1 MiB steps up to 4 GiB has 4,096; the fit keeps p2p points in the calibration YAML, which must stay under
#: MAX_YAML_BYTES (~60 bytes a point)
MAX_LOG_SIZES = 4096
#: largest number of YAML nodes (scalars, lists, mappings) in one document, aliases counted as expanded
MAX_YAML_NODES = 100_000

#: transformer layers of a model (the engine keeps per-layer tables; the deepest published models have ~200)
MAX_LAYERS = 4096
#: nodes of one scenario or one collective / MoE group (a placement walks every node's links)
MAX_NODES = 16_384
#: routed experts of a MoE layer (routing tables are ep x experts; the largest published models have 384)
MAX_EXPERTS = 4096
#: router scores drawn by a seeded routing (tokens per rank x ep x experts; ~3 s); expected counts (no seed) have
#: no such limit
MAX_SAMPLED_SCORES = 1 << 26
#: GPUs in one scenario (system.nodes x GPUs per node) and ranks in one `simulator collective` group
MAX_GPUS = 131_072
#: nodes `simulator topology` builds as a graph (every GPU, NIC and switch is a vertex)
MAX_TOPOLOGY_NODES = 512
#: tokens per rank of `simulator moe` (the routing samples every token)
MAX_MOE_TOKENS = 1 << 22
#: pipeline operations of one training step (micro-batches x pp x vpp x 2 passes) the timeline replays
MAX_TIMELINE_OPS = 1 << 20
#: plans in one sweep, unless `simulator sweep --max-plans` raises it
MAX_SWEEP_PLANS = 1_000_000
#: largest message size of `simulator collective --bytes` (1 PiB)
MAX_COLLECTIVE_BYTES = 1 << 50
