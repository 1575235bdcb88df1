"""``kubeacc demo``: kube-acc's main job on this machine alone.

Starts the multi-node testbed (real etcd, kube-apiserver, scheduler, controller manager and four
real kubelets, built from upstream sources on first use), installs kube-acc on it (CRDs,
DeviceClasses, controller; node agent and life-cycle agent on every node, each on a synthetic
host of its own shape), applies two AcceleratorPolicies and the sample claims with a pod each,
waits until every pod runs, and shows what went where, the inventory with who uses each
device, and a life-cycle operation: a Reset of a busy GPU (refused), then the same Reset with
``drainFirst`` (it waits for the pod to go, then runs).
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from kubeacc.cli.demo_claims import BITSTREAM, CLAIMS, POLICIES, claim, pod, policy

if TYPE_CHECKING:
    from lightkube import Client

    from kubeacc.cli.demo_stack import KubeaccStack

NAMESPACE = "kubeacc-demo"
#: The claim whose GPU the life-cycle part resets.
BUSY_CLAIM = "h100"


def demo_command(
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the cluster and agents running until Ctrl-C.")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="Where to put synthetic hosts and agent state.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each step.")] = 120,
    runtime: Annotated[
        str,
        typer.Option(
            help="fake: the kubelets' in-memory CRI (nothing runs); real: containerd + runc, the "
            "workload containers run and print the devices they got."
        ),
    ] = "fake",
) -> None:
    """Run kube-acc on a local four-node cluster: inventory, policies, claims, pods, operations."""
    # Long lines (kubectl's table, messages) are not wrapped: tests and readers grep them.
    console = Console(soft_wrap=True)
    if not console.is_terminal or console.width < 150:
        console = Console(width=150, soft_wrap=True)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if runtime not in ("fake", "real"):
        from kubeacc.cli.errors import fail

        fail(f"--runtime must be fake or real, not {runtime!r}")
    base = workdir or Path(tempfile.mkdtemp(prefix="kubeacc-demo-"))
    _run(console, base, keep, timeout, runtime == "real")


def _run(console: Console, base: Path, keep: bool, timeout: float, real: bool = False) -> None:
    try:
        import kubeacc.testbed  # noqa: F401 - the test kit: in a source checkout only
    except ImportError:
        from kubeacc.cli.errors import FAILURE, fail

        fail(
            "kubeacc demo needs the testbed, which comes with a source checkout of kube-acc, "
            "not with the installed package: run bash scripts/demo.sh there",
            FAILURE,
        )
    from kubeacc.cli.demo_stack import KubeaccStack
    from kubeacc.testbed import KUBERNETES_VERSION, Testbed
    from kubeacc.testbed.build import ensure_built
    from kubeacc.testbed.shapes import MULTINODE_SHAPES, multinode_options

    t0 = time.monotonic()
    title = "kube-acc demo: one accelerator framework on a local four-node Kubernetes"
    if console.is_terminal:
        console.rule(title)
    else:  # into a file or a pipe: no box-drawing line (docs/cli.md, "Tables")
        console.print(f"== {title} ==", highlight=False)
    console.print(
        f"[bold]1.[/] testbed binaries (Kubernetes {KUBERNETES_VERSION}, built from upstream)"
    )
    bins = ensure_built(out=sys.stderr)
    console.print(f"   ready in {bins}")
    console.print(
        "[bold]2.[/] etcd, kube-apiserver, scheduler, controller manager and four kubelets"
    )
    nodes = multinode_options()
    if real:
        console.print("   real runtime: containerd + runc per node (built on first use)")
        for node in nodes:
            node.runtime = "containerd"
    tb = Testbed.start(bin_dir=bins, nodes=nodes, keep=keep)
    problems: list[str] = []
    stack = KubeaccStack(tb, base, {s.name: s.profile for s in MULTINODE_SHAPES}, interval=0.5)
    try:
        console.print(f"   cluster up in {time.monotonic() - t0:.0f} s; kubeconfig {tb.kubeconfig}")
        console.print(
            "[bold]3.[/] kube-acc: CRDs, DeviceClasses, controller; on every node the node agent "
            "(DRA plugin) and the life-cycle agent"
        )
        stack.start()
        console.print(f"   DeviceClasses: {', '.join(stack.classes)}")
        for shape in MULTINODE_SHAPES:
            n = len(stack.nodes[shape.name].agent.inventory.devices)
            console.print(f"   {shape.name:<12} {shape.role:<40} {n:>2} devices ({shape.profile})")
        client = stack.client()
        problems = _policies(console, client, timeout)
        problems += _claims_and_pods(console, client, tb, timeout, real)
        from kubeacc.cli.demo_report import (
            claims_table,
            fpga_programmed,
            inventory_table,
            wait_for_users,
        )

        claims_table(console, client, stack, NAMESPACE)
        if not fpga_programmed(console, client, NAMESPACE, "fpga-bitstream", BITSTREAM, timeout):
            problems.append("the FPGA claim's bitstream was not programmed")
        wait_for_users(client, NAMESPACE, min(timeout, 30))
        inventory_table(console, tb)
        problems += _lifecycle(console, client, stack, timeout)
        console.print(f"\ndemo finished in {time.monotonic() - t0:.0f} s")
        if problems:
            console.print(f"[red]demo problems: {'; '.join(problems)}[/]")
        if keep:
            console.print(
                f"[bold]--keep[/]: cluster running; kubectl: {' '.join(tb.kubectl())} "
                "get accelerators,acceleratoroperations -A.  Ctrl-C stops it."
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        stack.stop()
        tb.stop()
    if problems:
        raise typer.Exit(1)


def _policies(console: Console, client: Client, timeout: float) -> list[str]:
    from lightkube.codecs import from_dict

    from kubeacc.crds.resources import AcceleratorPolicy, as_dict

    console.print("[bold]4.[/] AcceleratorPolicies")
    for name in POLICIES:
        client.create(from_dict(policy(name)))
    deadline = time.monotonic() + timeout
    ready: dict[str, str] = {}
    while time.monotonic() < deadline and len(ready) < len(POLICIES):
        for name in POLICIES:
            status = as_dict(client.get(AcceleratorPolicy, name)).get("status") or {}
            if status.get("deviceClassName"):
                ready[name] = (
                    f"DeviceClass {status['deviceClassName']}, "
                    f"{status.get('matchedAccelerators', 0)} accelerators"
                )
        time.sleep(0.3)
    for name, spec in POLICIES.items():
        what = "allows " + ", ".join(b["name"] for b in spec.get("allowedBitstreams", []))
        if "sharing" in spec:
            what = f"sharing {spec['sharing']['mode']}"
        console.print(f"   {name:<12} {what:<40} -> {ready.get(name, '[red]no DeviceClass[/]')}")
    return [f"policy {n} has no DeviceClass" for n in POLICIES if n not in ready]


def _claims_and_pods(
    console: Console, client: Client, tb: Any, timeout: float, real: bool = False
) -> list[str]:
    from lightkube.codecs import from_dict
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Pod

    client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
    tb.wait_service_account(NAMESPACE)
    console.print(f"[bold]5.[/] {len(CLAIMS)} claims and one pod each in namespace {NAMESPACE}")
    for name in CLAIMS:
        client.create(from_dict(claim(name, NAMESPACE)))
        client.create(from_dict(pod(name, NAMESPACE, real)))
    t0 = time.monotonic()
    running = 0
    while time.monotonic() - t0 < timeout:
        pods = list(client.list(Pod, namespace=NAMESPACE))
        running = sum(1 for p in pods if p.status and p.status.phase == "Running")
        if running == len(CLAIMS):
            break
        time.sleep(0.5)
    console.print(
        f"   {running}/{len(CLAIMS)} pods Running after {time.monotonic() - t0:.0f} s "
        "(scheduled by kube-scheduler, prepared by each node's agent, started by its kubelet)"
    )
    return [] if running == len(CLAIMS) else [f"{running}/{len(CLAIMS)} pods Running"]


def _lifecycle(console: Console, client: Client, stack: KubeaccStack, timeout: float) -> list[str]:
    from lightkube.resources.core_v1 import Pod

    from kubeacc.cli.demo_report import gpu_of_claim, operation, show_operation

    console.print("[bold]8.[/] life cycle: reset the GPU of a running pod")
    target = gpu_of_claim(client, NAMESPACE, BUSY_CLAIM)
    if target is None:
        console.print(f"   [red]claim {BUSY_CLAIM} holds no GPU; skipping the operations[/]")
        return [f"claim {BUSY_CLAIM} holds no GPU"]
    problems = []
    refused = operation(client, NAMESPACE, "reset-busy-gpu", target, drain_first=False)
    if show_operation(console, client, NAMESPACE, refused, timeout) != "Failed":
        problems.append("the Reset of a busy GPU was not refused")
    drained = operation(client, NAMESPACE, "reset-after-drain", target, drain_first=True)
    show_operation(console, client, NAMESPACE, drained, timeout, draining=True)
    console.print(f"   deleting pod {BUSY_CLAIM}-pod, the GPU's user")
    client.delete(Pod, f"{BUSY_CLAIM}-pod", namespace=NAMESPACE, grace_period=0)
    if show_operation(console, client, NAMESPACE, drained, timeout) != "Succeeded":
        problems.append("the drainFirst Reset did not succeed")
    return problems
