"""Tables describing hardware profiles and topologies."""

from __future__ import annotations

from simulator.hardware import GpuSpec, NodeSpec
from simulator.report.table import render_table
from simulator.topology import Path, Topology
from simulator.units import GB, GiB, MiB

TERA_FLOPS = 1e12
MHZ = 1e6


def gpu_table(gpu: GpuSpec) -> str:
    """The GPU spec: SM-level resources, clocks, derived and stated peaks, memory and links."""
    sm = gpu.sm
    rows = [
        ("architecture", f"{gpu.architecture} (sm_{gpu.compute_capability.replace('.', '')})"),
        ("SMs", f"{gpu.sms} of {gpu.die.sms} ({gpu.die.gpcs} GPC x {gpu.die.tpcs_per_gpc} TPC x "
                f"{gpu.die.sms_per_tpc} SM)"),
        ("per SM", f"{sm.fp32_cores} FP32 cores, {sm.tensor_cores} tensor cores (gen {sm.tensor_core_generation}), "
                   f"{sm.processing_blocks} processing blocks"),
        ("register file / L1+shared per SM", f"{sm.register_file_bytes / 1024:.0f} KiB / "
                                             f"{sm.l1_shared_bytes / 1024:.0f} KiB (max shared "
                                             f"{sm.max_shared_bytes / 1024:.0f} KiB)"),
        ("clocks", f"max {gpu.clocks.max_sm / MHZ:.0f} MHz, tensor peaks at {gpu.clocks.tensor_peak / MHZ:.0f} MHz"),
        ("memory", f"{gpu.memory.capacity / GiB:.1f} GiB {gpu.memory.kind} ({_capacity(gpu.memory)}), "
                   f"{gpu.memory.bandwidth / GB:.0f} GB/s, L2 {gpu.memory.l2 / MiB:.0f} MiB"),
        ("NVLink", f"gen {gpu.nvlink.generation}, {gpu.nvlink.links} links x {gpu.nvlink.bandwidth_per_link / GB:g} "
                   f"GB/s = {gpu.nvlink.total_Bps / GB:g} GB/s per direction" if gpu.nvlink else "none"),
        ("PCIe", f"Gen{gpu.pcie.generation} x{gpu.pcie.lanes} ({gpu.pcie.bandwidth_Bps / GB:.1f} GB/s per direction)"),
        ("power", f"{gpu.tdp_w:g} W"),
    ]
    spec = render_table(["field", "value"], rows, title=f"{gpu.name}  ({gpu.source})")
    peaks = []
    for dtype in gpu.dtypes:
        stated = gpu.stated_dense_peaks.get(dtype)  # type: ignore[call-overload]
        derived = gpu.dense_peak_flops(dtype)
        peaks.append((dtype, gpu.sms, gpu.sm.dense_flops_per_clock[dtype], round(gpu.peak_clock_hz(dtype) / MHZ),
                      derived / TERA_FLOPS, stated / TERA_FLOPS if stated else None,
                      f"{(derived / stated - 1):+.2%}" if stated else ""))
    peak_table = render_table(["dtype", "SMs", "FLOP/clk/SM", "MHz", "derived TFLOP/s", "datasheet TFLOP/s", "diff"],
                              peaks, title=f"dense peaks (structured sparsity x{gpu.sparsity_factor:g})")
    return spec + "\n\n" + peak_table


def node_table(node: NodeSpec) -> str:
    """The node spec: GPU count, NVLink/NVSwitch wiring, PCIe complexes, CPUs, NICs."""
    nvs = node.nvswitch
    rows = [
        ("GPUs", f"{node.gpus}x {node.gpu.name}"),
        ("NVSwitch", f"{nvs.count}x gen {nvs.generation}{' with NVLS' if nvs.nvls else ''}, links per GPU per switch "
                     f"{nvs.links_per_gpu}" if nvs else "none"),
        ("NVLink domain", f"{node.nvlink_domain.nodes} nodes ({node.nvlink_domain.nodes * node.gpus} GPUs) share "
                          f"the NVSwitches ({node.nvlink_domain.switch_trays} switch trays)"
         if node.nvlink_domain else "the node"),
        ("NVLink bridges", ", ".join(f"GPU{b.gpus[0]}-GPU{b.gpus[1]} x{b.links}" for b in node.nvlink_bridges)
         or "none"),
        ("PCIe", f"Gen{node.pcie.generation}, {node.pcie.switch_levels} switch level(s), GPU P2P over PCIe: "
                 f"{'yes' if node.pcie.gpu_p2p else 'no (SHM through host memory)'}"),
        ("PCIe complexes", "; ".join(f"NUMA {c.numa}: GPUs {c.gpus} NICs {c.nics}" for c in node.pcie.complexes)),
        ("CPUs", f"{node.cpu.sockets}x {node.cpu.model} ({node.cpu.cores_per_socket} cores, "
                 f"{node.cpu.numa_per_socket} NUMA domains each, {node.cpu.socket_link})"),
        ("NICs", f"{node.nics.count}x {node.nics.model} {node.nics.kind} {node.nics.bandwidth * 8 / GB:g} Gb/s"
         if node.nics else "none"),
        ("fabric default", f"{node.fabric.kind}, {node.fabric.leaf_ports}-port leaves, "
                           f"oversubscription {node.fabric.oversubscription:g}" if node.fabric else "none"),
    ]
    return render_table(["field", "value"], rows, title=f"{node.name}  ({node.source})") + "\n\n" + gpu_table(node.gpu)


def topology_summary(topology: Topology) -> str:
    """Vertex and edge counts, NVLink domains, and the bandwidth of representative GPU pairs."""
    graph = topology.graph
    kinds: dict[str, int] = {}
    for _, kind in graph.nodes(data="kind"):
        kinds[kind] = kinds.get(kind, 0) + 1
    links: dict[str, int] = {}
    for _, _, link in graph.edges(data="link"):
        links[link] = links.get(link, 0) + 1
    lines = [f"{graph.graph.get('name')}: {len(topology.gpus)} GPUs, {graph.number_of_nodes()} vertices, "
             f"{graph.number_of_edges()} directed edges",
             "vertices: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
             "directed edges: " + ", ".join(f"{k} {n}" for k, n in sorted(links.items())),
             f"NVLink domain of gpu0: {len(topology.nvlink_domain(0))} GPUs"]
    rows = []
    for a, b in _representative_pairs(topology):
        path = topology.path(a, b)
        rows.append((a, b, path.transport, len(path.hops) - 1, path.bottleneck_Bps / GB,
                     topology.pair_bandwidth(a, b) / GB, path.latency_s * 1e6))
    if rows:
        lines += ["", render_table(["from", "to", "transport", "hops", "path GB/s", "max-flow GB/s", "latency us"],
                                   rows, title="GPU pairs (bandwidth per direction)")]
    return "\n".join(lines)


def _representative_pairs(topology: Topology) -> list[tuple[str, str]]:
    gpus = topology.gpus
    pairs = [(gpus[0], gpus[1])] if len(gpus) > 1 else []
    per_node = topology.cluster.node.gpus
    if per_node > 2:
        pairs.append((gpus[0], gpus[per_node - 1]))
    if topology.cluster.nodes > 1:
        pairs.append((gpus[0], gpus[per_node]))
        pairs.append((gpus[0], gpus[-1]))
    return pairs


def path_table(path: Path) -> str:
    """Hop list of one route with each edge's link type."""
    rows = [(i, u, v, link) for i, (u, v, link) in
            enumerate(zip(path.hops, path.hops[1:], path.links, strict=False))]
    head = (f"{path.hops[0]} -> {path.hops[-1]}: transport {path.transport}, bottleneck "
            f"{path.bottleneck_Bps / GB:.2f} GB/s per direction, latency {path.latency_s * 1e6:.2f} us")
    return head + "\n" + render_table(["hop", "from", "to", "link"], rows)


def _capacity(memory) -> str:
    """Where the capacity comes from: ``143,771 MiB as the driver reports it; datasheet 141 GB``, or the datasheet's
    figure when the profile found no driver total (``Memory.capacity_source``)."""
    if memory.capacity_source.startswith("datasheet"):
        return "the datasheet's figure: no driver total found"
    text = f"{memory.capacity / MiB:,.0f} MiB as the driver reports it"
    ds = memory.datasheet_capacity
    if ds is not None and ds != memory.capacity:
        text += f"; datasheet {ds / GB:g} GB" if ds % GiB else f"; datasheet {ds / GiB:g} GiB"
    return text
