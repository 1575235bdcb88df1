"""A node reboot with every kind of claim prepared (issue 46's "Must show").

Two pods of every claim kind run on the fault runner's three nodes. Each node is then taken down
in turn: its kubelet stopped, one pod of each kind it runs force-deleted while it is down (a pod
whose node will never tell of its end), then the node's reboot (tests/faults/faults.py: hardware
back to boot, MIG instances gone, bitstreams lost, ``/var/run`` empty; the GPU node's a power
cut that drops every unflushed write). After the nodes are back:

- every kept pod runs again on the devices its claim was allocated, and the kubelet's new
  containers name them (their CDI devices, or the device plugin's device nodes);
- the invariants of tests/faults/invariants.py hold: its MIG instance exists again, its FPGA
  carries the claim's bitstream, its share's limits are the allocation's, its status names its
  devices;
- nothing is left of the force-deleted pods' claims: no checkpoint entry, CDI spec, MIG
  instance, record or metadata on any node.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.testbed import Testbed
from kubeacc.testbed.kubelet import KubeletOptions
from tests.faults import extender, nodes, powerloss
from tests.faults import faults as F
from tests.faults.invariants import ClusterView, Tracker, check
from tests.faults.runner import NAMESPACE, Config, Runner
from tests.faults.workload import KINDS as ALL_KINDS
from tests.faults.workload import Workload

pytestmark = pytest.mark.cluster

SETTLE_S = 240.0
NODES = {"fault-gpu": "dgx-h100", "fault-xpu": "kunlun-xpu", "fault-fpga": nodes.FPGA_PROFILE}
#: Every claim kind (the extender's pods hold no claim: tests/faults/test_runner.py has them).
KINDS = tuple(k for k in ALL_KINDS if k != extender.KIND)


def _pods(view: ClusterView, prefix: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in view.pods if p["metadata"]["name"][0] == prefix}


def _allocations(view: ClusterView) -> dict[str, Any]:
    return {c["metadata"]["name"]: (c["status"] or {}).get("allocation") for c in view.claims}


def _containers(tb: Testbed, pod: dict[str, Any]) -> list[Any]:
    return tb.node(pod["spec"]["nodeName"]).container_records(NAMESPACE, pod["metadata"]["name"])


def _claims_of(view: ClusterView, pod: dict[str, Any]) -> set[str]:
    """The UIDs of the claims reserved for ``pod`` (named in its spec, or the claim of its
    extended resources that the scheduler made)."""
    uid = pod["metadata"]["uid"]
    return {
        c["metadata"]["uid"]
        for c in view.claims
        if any(r.get("uid") == uid for r in (c.get("status") or {}).get("reservedFor") or [])
    }


def _names_its_devices(record: Any, uids: set[str]) -> bool:
    return all(
        any(d.startswith(f"kubeacc.io/claim={u}-") for d in record.cdi_devices) for u in uids
    )


def _wait(runner: Runner, problems: Callable[[ClusterView], list[str]], what: str) -> ClusterView:
    """Read the cluster until ``problems`` finds none; fail with the last ones found."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        view = runner._view()
        found = problems(view)
        if not found:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {SETTLE_S:.0f}s: {found[:20]}")
        time.sleep(1)


def _not_running(view: ClusterView, prefix: str) -> list[str]:
    pods = _pods(view, prefix)
    out = [f"{n}: {(p.get('status') or {}).get('phase')}" for n, p in sorted(pods.items())]
    out = [o for o in out if not o.endswith(": Running")]
    if len(pods) != len(KINDS):
        out.append(f"{len(pods)} {prefix} pods, not {len(KINDS)}")
    return out


def test_a_reboot_of_every_node_with_every_claim_kind_prepared(tmp_path: Path) -> None:
    config = Config(seed=46, duration=0, nodes=NODES, kinds=KINDS, fault_kinds=())
    with Testbed.start(nodes=[KubeletOptions(node_name=n) for n in NODES]) as tb:
        runner = Runner(tb, tmp_path, config)
        try:
            runner._start()
            workload = Workload(
                runner.client, NAMESPACE, random.Random(46), KINDS, max_live=2 * len(KINDS)
            )
            for kind in KINDS:  # k: kept, g: its pod goes while its node is down
                workload._create(f"k1-{kind}")
                workload._create(f"g1-{kind}")
            view = _wait(
                runner, lambda v: _not_running(v, "k") + _not_running(v, "g"), "all Running"
            )
            kept = _pods(view, "k")
            allocated = _allocations(view)
            claims = {n: _claims_of(view, p) for n, p in kept.items()}
            assert all(claims.values()), claims
            gone = [c["metadata"]["name"] for c in view.claims if c["metadata"]["name"][0] == "g"]
            gone_uids = {c["metadata"]["uid"] for c in view.claims} - set().union(*claims.values())
            on_node = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in view.pods}
            assert set(on_node.values()) == set(NODES), on_node  # every node has work

            for name in sorted(NODES):
                tb.node(name).stop_kubelet()
                # The kept pods' container records go: the fake runtime numbers its records
                # from 1 again after its restart, so a new one can take an old one's name.
                for record in tb.node(name).container_records_dir.glob(f"{NAMESPACE}_k1-*"):
                    record.unlink()
                for pod in sorted(p for p, n in on_node.items() if n == name and p[0] == "g"):
                    runner.client.delete(Pod, pod, namespace=NAMESPACE, grace_period=0)
                kind = F.POWER_LOSS if NODES[name] == "dgx-h100" else F.NODE_REBOOT
                runner.injector.inject(F.Fault(kind, node=name))
            for claim in gone:  # the extended resources' claim goes with its pod
                with contextlib.suppress(ApiError):
                    runner.client.delete(ResourceClaim, claim, namespace=NAMESPACE)

            def remade(pod: dict[str, Any]) -> str:
                """Why the kubelet did not make the pod's container again, naming its claims'
                devices ("" when it did)."""
                name = pod["metadata"]["name"]
                new = _containers(tb, pod)
                if not new:
                    return f"{name}: no container made again"
                if not _names_its_devices(new[-1], claims[name]):
                    return f"{name}: its new container has {new[-1].cdi_devices}"
                return ""

            def problems(v: ClusterView) -> list[str]:
                found = check(
                    v,
                    Tracker(),
                    set(NODES),
                    leak_grace=-1,
                    pending_grace=-1,
                    hw_grace=-1,
                    afu=nodes.AFU,
                )
                return [
                    *_not_running(v, "k"),
                    *[f"{n} still there" for n in _pods(v, "g")],
                    *[w for p in _pods(v, "k").values() if (w := remade(p))],
                    *[f"{f.kind}: {f.detail}" for f in found],
                ]

            view = _wait(runner, problems, "kept pods Running again and nothing left of the others")
            assert _allocations(view) == {n: a for n, a in allocated.items() if n[0] == "k"}
            for node in view.nodes.values():
                assert not gone_uids & set(node.checkpoint), node.name
                assert not gone_uids & node.cdi_uids, node.name
        finally:
            for node in runner.nodes.values():
                node.agent.stop()
                powerloss.unmount(node)
            runner.clocks.stop()
