"""``kubeacc demo``: kube-acc's main job on this machine alone.

Starts the testbed (real etcd, kube-apiserver, scheduler, controller manager and one real
kubelet, built from upstream sources on first use), runs the node agent for four synthetic
nodes, applies the DeviceClasses and sample claims, creates pods and shows what the real
scheduler allocated where and what the real kubelet handed the containers.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kubeacc.synthetic import profiles

NAMESPACE = "kubeacc-demo"


@dataclass(frozen=True)
class DemoNode:
    name: str
    profile: str
    role: str


#: The testbed's kubelet node first; the others are Node objects without a kubelet.
NODES = (
    DemoNode("node-a", "dgx-h100", "8x H100 + 8 NICs with SR-IOV (real kubelet)"),
    DemoNode("fpga-node", "intel-fpga-dfl", "2 Intel FPGAs (DFL)"),
    DemoNode("kunlun-node", "kunlun-xpu", "Baidu KunLun XPUs"),
    DemoNode("edge-node", "edge-mixed", "SmartNIC/edge: L4, Xilinx FPGA, NIC"),
)


def demo_command(
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the cluster and agents running until Ctrl-C.")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="Where to put synthetic hosts and agent state.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for allocations.")] = 120,
) -> None:
    """Run the DRA driver on a local cluster: allocate GPUs, FPGAs, NICs and XPUs to pods."""
    console = Console()
    if not console.is_terminal or console.width < 150:
        console = Console(width=150)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    base = workdir or Path(tempfile.mkdtemp(prefix="kubeacc-demo-"))
    _run(console, base, keep, timeout)


def _run(console: Console, base: Path, keep: bool, timeout: float) -> None:
    from kubeacc.agent.dra.classes import apply_device_classes
    from kubeacc.agent.runner import Agent, AgentOptions
    from kubeacc.testbed import Testbed
    from kubeacc.testbed.build import ensure_built

    t0 = time.monotonic()
    console.rule("kube-acc demo: DRA driver kubeacc.io on a local Kubernetes")
    console.print("[bold]1.[/] testbed binaries (Kubernetes v1.36 built from upstream sources)")
    bins = ensure_built(out=sys.stderr)
    console.print(f"   ready in {bins}")
    console.print(
        "[bold]2.[/] starting etcd, kube-apiserver, scheduler, controller manager, kubelet"
    )
    tb = Testbed.start(bin_dir=bins, keep=keep)
    agents: list[Agent] = []
    try:
        client = tb.client(field_manager="kubeacc-demo")
        console.print(f"   cluster up in {time.monotonic() - t0:.0f} s; kubeconfig {tb.kubeconfig}")
        console.print("[bold]3.[/] node agents on synthetic hosts")
        for node in NODES:
            host = profiles.build(node.profile, base / "hosts" / node.name)
            real = node.name == tb.node_name
            if not real:
                _api_only_node(client, node.name)
            opts = AgentOptions(
                node_name=node.name,
                host_root=host,
                kubeconfig=tb.kubeconfig,
                kubelet_root=tb.kubelet.root_dir,
                cdi_dir=base / "cdi" / node.name,
                state_dir=base / "state" / node.name,
                kubelet_plugin=real,
            )
            agent = Agent(opts)
            agent.start()
            agents.append(agent)
            how = "kubelet plugin + slices" if real else "slices only: no kubelet on this node"
            n = len(agent.inventory.devices)
            console.print(f"   {node.name:<12} {node.role:<48} {n:>2} devices  ({how})")
        for agent in agents:
            agent.published.wait(30)
        classes = apply_device_classes(client)
        console.print(f"[bold]4.[/] DeviceClasses: {', '.join(classes)}")
        _claims_and_pods(console, client, tb, agents, timeout)
        console.print(f"\ndemo finished in {time.monotonic() - t0:.0f} s")
        if keep:
            console.print(
                f"[bold]--keep[/]: cluster running; kubectl: {' '.join(tb.kubectl())} "
                f"-n {NAMESPACE} get pods,resourceclaims.  Ctrl-C stops it."
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        for agent in agents:
            agent.stop()
        tb.stop()


def _api_only_node(client: Any, name: str) -> None:
    """A Node object with capacity but no kubelet (the scheduler can place pods on it)."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    client.create(Node(metadata=ObjectMeta(name=name, labels={"kubeacc.io/demo": "api-only"})))
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    status = {"capacity": resources, "allocatable": resources}
    client.patch(Node.Status, name, {"status": status}, patch_type=PatchType.MERGE)


def _claims_and_pods(console: Console, client: Any, tb: Any, agents: Any, timeout: float) -> None:
    from lightkube.codecs import from_dict
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Pod
    from lightkube.resources.resource_v1 import ResourceClaim

    from kubeacc.cli.demo_claims import CLAIMS, claim, pod

    client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
    tb.wait_service_account(NAMESPACE)
    console.print(f"[bold]5.[/] {len(CLAIMS)} claims and one pod each in namespace {NAMESPACE}")
    for name in CLAIMS:
        client.create(from_dict(claim(name, NAMESPACE)))
        client.create(from_dict(pod(name, NAMESPACE)))

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        claims = {c.metadata.name: c for c in client.list(ResourceClaim, namespace=NAMESPACE)}
        pods = {p.metadata.name: p for p in client.list(Pod, namespace=NAMESPACE)}
        allocated = all(c.status and c.status.allocation for c in claims.values())
        on_a = [p for p in pods.values() if p.spec.nodeName == tb.node_name]
        started = all(p.status and p.status.phase == "Running" for p in on_a)
        if allocated and started and len(claims) == len(CLAIMS):
            break
        time.sleep(0.5)
    inventories = {a.opts.node_name: a.inventory for a in agents}
    _table(console, tb, claims, pods, inventories, agents[0].opts.cdi_dir)


def _units(cdi_dir: Path, uid: str) -> str | None:
    import json

    from kubeacc.agent.dra.cdi import spec_path

    try:
        spec = json.loads(spec_path(cdi_dir, uid).read_text())
    except (OSError, ValueError):
        return None
    env = spec.get("containerEdits", {}).get("env", [])
    return next((e for e in env if e.startswith("ACCELERATOR_UNITS=")), None)


def _table(console: Console, tb: Any, claims: Any, pods: Any, invs: Any, cdi_dir: Path) -> None:
    from kubeacc.cli.demo_claims import CLAIMS

    records = {r.pod: r for r in tb.kubelet.container_records(namespace=NAMESPACE)}
    table = Table(title="What the scheduler allocated and the kubelet prepared", show_lines=True)
    for col in ("claim", "wants", "node", "devices (request: device, model, PCIe root)", "pod"):
        table.add_column(col)
    for name, (what, _spec) in CLAIMS.items():
        c = claims.get(name)
        alloc = c.status.allocation if c and c.status else None
        p = pods.get(f"{name}-pod")
        node = (p.spec.nodeName if p and p.spec else None) or "-"
        lines = []
        for r in alloc.devices.results if alloc else []:
            dev = _find(invs.get(r.pool), r.device)
            model = dev[0] if dev else "?"
            root = dev[1] if dev else "?"
            lines.append(f"{r.request}: [bold]{r.device}[/] {model} {root}")
        phase = (p.status.phase if p and p.status else None) or "-"
        rec = records.get(f"{name}-pod")
        if rec is not None:
            phase += "\nCDI: " + ", ".join(d.split("=", 1)[1][:13] + "…" for d in rec.cdi_devices)
            units = _units(cdi_dir, c.metadata.uid) if c else None
            if units:
                phase += f"\n{units} (CDI spec)"
        elif node not in ("-", tb.node_name):
            phase += " (no kubelet)"
        table.add_row(name, what, node, "\n".join(lines) or "[red]not allocated[/]", phase)
    console.print(table)
    console.print(
        "Only node-a runs a kubelet: pods there reach Running with the CDI devices our plugin "
        "returned.\nThe other nodes are Node objects whose agents publish ResourceSlices; the "
        "real scheduler allocates\nfrom them and binds the pods, which then stay Pending (no "
        "kubelet to start them)."
    )


def _find(inv: Any, device: str) -> tuple[str, str] | None:
    if inv is None:
        return None
    for d in inv.devices:
        if d.name == device:
            return d.model, d.pcie_root or ""
        for part in d.partitions:
            if f"{d.name}-vf{part.index}" == device:
                return f"VF {part.index} of {d.model}", d.pcie_root or ""
    return None
