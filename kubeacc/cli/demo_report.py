"""What ``kubeacc demo`` shows: the claims table, the FPGA that a claim programmed, the
inventory as ``kubectl get accelerators`` prints it, and the life-cycle operations."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kubeacc.cli.demo_claims import CLAIMS
from kubeacc.cli.output import plain_table

if TYPE_CHECKING:
    from lightkube import Client

    from kubeacc.cli.demo_stack import KubeaccStack
    from kubeacc.synthetic.bitstreams import SyntheticBitstream
    from kubeacc.testbed import Testbed

#: ``kubectl get accelerators`` with the columns the demo is about (users: status.allocatedTo).
INVENTORY_COLUMNS = ",".join(
    (
        "NAME:.metadata.name",
        "NODE:.spec.node",
        "TYPE:.status.device.type",
        "MODEL:.status.device.model",
        "HEALTH:.status.device.health.state",
        "CORDONED:.spec.cordoned",
        "USERS:.status.allocatedTo[*].name",
    )
)


def claims_table(console: Console, client: Client, stack: KubeaccStack, namespace: str) -> None:
    from lightkube.resources.core_v1 import Pod
    from lightkube.resources.resource_v1 import ResourceClaim

    claims: dict[str | None, Any] = {
        c.metadata.name: c for c in client.list(ResourceClaim, namespace=namespace) if c.metadata
    }
    pods: dict[str | None, Any] = {
        p.metadata.name: p for p in client.list(Pod, namespace=namespace) if p.metadata
    }
    console.print("[bold]6.[/] what the scheduler allocated and each node's kubelet prepared")
    columns = ("claim", "wants", "node", "devices (request: device, model, PCIe root)", "pod")
    rows: list[list[str | Text]] = []
    for name, (what, _spec) in CLAIMS.items():
        c = claims.get(name)
        alloc = c.status.allocation if c and c.status else None
        p = pods.get(f"{name}-pod")
        node = (p.spec.nodeName if p and p.spec else None) or "-"
        lines = []
        for r in alloc.devices.results if alloc else []:
            components = stack.nodes.get(r.pool)
            dev = _find(components.agent.inventory if components else None, r.device)
            model, root = dev or ("?", "?")
            lines.append(f"{r.request}: [bold]{r.device}[/] {model} {root}")
        phase = (p.status.phase if p and p.status else None) or "-"
        if node in stack.nodes and stack.testbed.node(node).containerd is not None:
            phase += _container_output(stack.testbed.node(node), namespace, f"{name}-pod")
        elif node in stack.nodes:
            records = stack.testbed.node(node).container_records(namespace, f"{name}-pod")
            if records:
                cdi = ", ".join(d.split("=", 1)[1][:13] + "…" for d in records[-1].cdi_devices)
                phase += f"\nCDI: {cdi}"
            units = _units(stack.cdi_dir(node), c.metadata.uid) if c else None
            if units:
                phase += f"\n{units}"
        devices = Text.from_markup("\n".join(lines) or "[red]not allocated[/]")
        rows.append([name, what, node, devices, phase])
    print_rows(console, columns, rows)


def print_rows(console: Console, columns: tuple[str, ...], rows: list[list[str | Text]]) -> None:
    """A rich table on a terminal; plain ``kubectl``-style columns into a file or a pipe
    (no box drawing, no colour), as every kubeacc table (docs/cli.md, "Tables")."""
    if not console.is_terminal:
        console.file.write(plain_table([c.upper() for c in columns], rows))
        return
    table = Table(show_lines=True)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)


#: What every container's /dev has anyway (left out of the demo's table).
_PLAIN_DEV = {
    "core",
    "fd",
    "full",
    "mqueue",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "termination-log",
    "tty",
    "urandom",
    "zero",
}


def _container_output(kubelet: Any, namespace: str, pod: str, wait: float = 15) -> str:
    """The real container's own output: its ACCELERATOR_UNITS and its non-standard /dev."""
    deadline = time.monotonic() + wait
    text = ""
    while time.monotonic() < deadline and "devices:" not in text:
        text = kubelet.container_log(namespace, pod, "app")
        time.sleep(0.2)
    out = ""
    for line in text.splitlines():
        if line.startswith("ACCELERATOR_UNITS="):
            out += "\n" + line.replace(",", ", ")  # lets the table wrap it
        elif line.startswith("devices:"):
            devs = [d for d in line.split()[1:] if d.split("/")[0] not in _PLAIN_DEV]
            out += "\n/dev: " + (" ".join(devs) or "-")
    return "\nthe container printed:" + out if out else "\n(no container output)"


def _units(cdi_dir: Path, uid: str) -> str | None:
    from kubeacc.node.cdi import spec_path

    try:
        spec = json.loads(spec_path(cdi_dir, uid).read_text())
    except (OSError, ValueError):
        return None
    env = spec.get("containerEdits", {}).get("env", [])
    return next((e for e in env if e.startswith("ACCELERATOR_UNITS=")), None)


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


def _claim_devices(client: Client, namespace: str, name: str) -> list[tuple[str, str]]:
    """(node, device) of every device a claim was allocated."""
    from lightkube import ApiError
    from lightkube.resources.resource_v1 import ResourceClaim

    try:
        c: Any = client.get(ResourceClaim, name, namespace=namespace)
    except ApiError:
        return []
    alloc = c.status.allocation if c.status else None
    return [(r.pool, r.device) for r in alloc.devices.results] if alloc else []


def fpga_programmed(
    console: Console,
    client: Client,
    namespace: str,
    claim_name: str,
    image: SyntheticBitstream,
    timeout: float,
) -> bool:
    """Wait until the Accelerator of the claim's FPGA reports the bitstream's AFU; say so."""
    from kubeacc.crds.resources import Accelerator, as_dict

    devices = _claim_devices(client, namespace, claim_name)
    if not devices:
        console.print(f"   [red]claim {claim_name} is not allocated: no FPGA programmed[/]")
        return False
    node, device = devices[0]
    name = f"{node}-{device}"
    deadline = time.monotonic() + timeout
    afu = None
    while time.monotonic() < deadline:
        status = as_dict(client.get(Accelerator, name)).get("status") or {}
        afu = ((status.get("device") or {}).get("fpga") or {}).get("afuId")
        if afu == image.afu_id:
            break
        time.sleep(0.5)
    if afu == image.afu_id:
        console.print(
            f"[bold]7.[/] FPGA {name}: {image.name} programmed for claim {claim_name} "
            f"(Accelerator status: AFU {afu})"
        )
        return True
    console.print(f"[bold]7.[/] [red]FPGA {name} not programmed (AFU {afu})[/]")
    return False


def _in_use(client: Client) -> dict[str, list[str]]:
    from kubeacc.crds.resources import Accelerator, as_dict

    out = {}
    for acc in client.list(Accelerator):
        d = as_dict(acc)
        out[d["metadata"]["name"]] = [
            u.get("name", "") for u in (d.get("status") or {}).get("allocatedTo") or []
        ]
    return out


def wait_for_users(client: Client, namespace: str, timeout: float) -> None:
    """Give the node agents a moment to record the users of every allocated device."""
    wanted = {
        f"{node}-{device.split('-vf')[0]}"
        for name in CLAIMS
        for node, device in _claim_devices(client, namespace, name)
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        users = _in_use(client)
        if all(users.get(a) for a in wanted):
            return
        time.sleep(0.5)


def inventory_table(console: Console, tb: Testbed) -> None:
    console.print(
        "[bold]   kubectl get accelerators[/] (model, node, health and users: "
        "status.allocatedTo, written by each node's agent)"
    )
    out = subprocess.run(
        [*tb.kubectl(), "get", "accelerators", "-o", f"custom-columns={INVENTORY_COLUMNS}"],
        capture_output=True,
        text=True,
        check=False,
    )
    console.print(out.stdout.rstrip() or f"[red]{out.stderr.strip()}[/]", highlight=False)


def gpu_of_claim(client: Client, namespace: str, claim_name: str) -> str | None:
    """The Accelerator name of the first GPU allocated to a claim."""
    for node, device in _claim_devices(client, namespace, claim_name):
        if device.startswith("gpu-"):
            return f"{node}-{device}"
    return None


def operation(client: Client, namespace: str, name: str, target: str, drain_first: bool) -> str:
    from lightkube.codecs import from_dict

    from kubeacc.crds.api import API_VERSION

    op = {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorOperation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"action": "Reset", "targets": [target], "drainFirst": drain_first},
    }
    client.create(from_dict(op))
    return name


def show_operation(
    console: Console,
    client: Client,
    namespace: str,
    name: str,
    timeout: float,
    *,
    draining: bool = False,
) -> str:
    """Wait until the operation has finished (or, with ``draining``, until it waits for the
    targets' users: condition Draining); print its state; return its phase."""
    from kubeacc.crds.resources import AcceleratorOperation, as_dict

    deadline = time.monotonic() + timeout
    op: dict[str, Any] = {}
    while time.monotonic() < deadline:
        op = as_dict(client.get(AcceleratorOperation, name, namespace=namespace))
        status = op.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        conditions = status.get("conditions") or []
        if draining and any(c["type"] == "Draining" and c["status"] == "True" for c in conditions):
            break
        time.sleep(0.3)
    spec, status = op.get("spec") or {}, op.get("status") or {}
    phase = status.get("phase") or "Pending"
    color = {"Failed": "red", "Succeeded": "green"}.get(phase, "yellow")
    drain = " drainFirst" if spec.get("drainFirst") else ""
    console.print(
        f"   {spec.get('action')}{drain} {', '.join(spec.get('targets', []))} "
        f"({name}): [{color}]{phase}[/] {status.get('message', '')}",
        highlight=False,
    )
    return str(phase)
