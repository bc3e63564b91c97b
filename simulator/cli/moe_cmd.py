"""``simulator moe``: dispatch and combine time and DeepEP-style bottleneck bandwidth of one EP configuration.

```
simulator moe --system PROFILE --nodes N --ep E --tokens T --hidden H --top-k K [--experts X]
              [--topk-groups G] [--backend nccl|deepep_normal|deepep_low_latency|cpu_proxy]
              [--transport ibrc|ibgda] [--qps Q] [--dispatch-dtype fp8|bf16] [--json] [--seed S]
```
"""

from __future__ import annotations

from simulator.cli.args import bounded_int, non_negative_int, positive_int
from simulator.cli.output import print_json
from simulator.errors import UserError
from simulator.limits import MAX_GPUS, MAX_MOE_TOKENS, MAX_NODES
from simulator.moe.backends import BACKENDS, DEFAULT_SETTINGS
from simulator.units import GIGA, MICRO


def register(subparsers) -> None:
    parser = subparsers.add_parser("moe", help="expert-parallel dispatch/combine time and bandwidth (DeepEP style)")
    parser.add_argument("--system", required=True, help="node profile, e.g. hgx_h800")
    parser.add_argument("--nodes", type=bounded_int(1, MAX_NODES, "a node count"), required=True,
                        help="nodes the EP group spans")
    parser.add_argument("--ep", type=bounded_int(1, MAX_GPUS, "a rank count"), required=True,
                        help="expert-parallel ranks")
    parser.add_argument("--tokens", type=bounded_int(1, MAX_MOE_TOKENS, "a token count"), required=True,
                        help=f"tokens per batch on each rank (at most {MAX_MOE_TOKENS:,})")
    parser.add_argument("--hidden", type=positive_int, required=True, help="model width")
    parser.add_argument("--top-k", type=positive_int, required=True, help="experts per token")
    parser.add_argument("--experts", type=positive_int, default=256, help="routed experts (default 256)")
    parser.add_argument("--topk-groups", type=positive_int, default=None,
                        help="node-limited routing: each token to at most G nodes (default: no limit)")
    parser.add_argument("--backend", default=DEFAULT_SETTINGS.backend, choices=BACKENDS,
                        help=f"MoE backend (simulator/implementation/moe_backends.py; default {DEFAULT_SETTINGS.backend})")
    parser.add_argument("--transport", choices=("ibrc", "ibgda"), default=None,
                        help="internode RDMA issued by a CPU proxy (ibrc) or the GPU (ibgda); default per backend")
    parser.add_argument("--qps", type=positive_int, default=None, help="queue pairs per peer (default per backend)")
    parser.add_argument("--dispatch-dtype", choices=("fp8", "bf16"), default="fp8")
    parser.add_argument("--seed", type=non_negative_int, default=None,
                        help="sample one routed batch with this seed (default: expected token counts)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from simulator.collectives import placement_for_profile
    from simulator.hardware import load_node
    from simulator.moe import CommSettings, ep_comm, route
    from simulator.moe.settings import transport_problem

    problem = transport_problem(args.backend, args.transport)
    if problem:
        raise UserError(problem, key_path="--transport")
    if args.ep % args.nodes:
        raise UserError(f"--ep {args.ep} does not spread evenly over --nodes {args.nodes}", key_path="ep")
    rpn = args.ep // args.nodes
    gpus_per_node = load_node(args.system).gpus
    if rpn > gpus_per_node:
        raise UserError(f"--ep {args.ep} over --nodes {args.nodes} puts {rpn} ranks on a node, but {args.system} has "
                        f"{gpus_per_node} GPUs per node (use --nodes {-(-args.ep // gpus_per_node)} or more)",
                        key_path="nodes")
    placement = placement_for_profile(args.system, args.ep, ranks_per_node=rpn)
    # ranks per NVLink domain: the node, or a multi-node domain (a GB200 NVL72 rack) whose trays talk over NVLink
    routing = route(args.tokens, args.top_k, args.experts, args.ep, node_limit=args.topk_groups,
                    ranks_per_node=placement.ranks_per_node, seed=args.seed)
    settings = CommSettings(backend=args.backend, transport=args.transport, qps=args.qps,
                            dispatch_dtype=args.dispatch_dtype)
    comm = ep_comm(routing, placement, args.hidden, settings)
    row = {"dispatch_us": comm.dispatch.time_s / MICRO, "combine_us": comm.combine.time_s / MICRO,
           "dispatch_GBps": comm.dispatch.bandwidth_Bps / GIGA, "combine_GBps": comm.combine.bandwidth_Bps / GIGA,
           "bottleneck": comm.dispatch.bottleneck}
    if args.json:
        print_json(row)
        return 0
    print(f"{args.backend} on {args.system}: EP {args.ep} over {args.nodes} node(s), {args.tokens} tokens/rank, "
          f"hidden {args.hidden}, top-{args.top_k} of {args.experts} experts, transport {comm.transport}, "
          f"{comm.qps} QP/peer, {comm.reserved_sms} SMs, load imbalance {routing.imbalance:.3f}")
    print(f"{'':10s}{'time (us)':>12s}{'GB/s':>10s}  {'reported on':12s}limited by")
    for name, k in (("dispatch", comm.dispatch), ("combine", comm.combine)):
        print(f"{name:10s}{k.time_s / MICRO:12.1f}{k.bandwidth_Bps / GIGA:10.1f}  {k.bottleneck:12s}{k.limiting}")
    return 0
