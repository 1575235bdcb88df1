"""The extender keeps a few fields of each Accelerator and Pod (kubeacc/extender/kept.py): its
state and its answers are the same on kept caches as on whole ones (testbed API server).

Realistic objects are created in the testbed's API server: two nodes of a synthetic
``dgx-h100``'s 8 H100s as Accelerators with what the life-cycle agent and others write (labels,
annotations, conditions, ``lastSeen``, ``hostDriver``, managed fields), one GPU cordoned and one
unhealthy, the second node's as PCIe cards (no NVLink; two switches per root), so that whole
GPUs are placed by ``links`` on one node and by ``pciePath``/``pcieRoot`` on the other; pods in
the shapes a cluster has (a share, whole GPUs, units, a finished pod, a pod bound elsewhere than
its decision says, a pod without GPUs, sidecars, init containers, environment, volumes), holding
GPUs through the decision annotation. Inventories with whole caches (the code before kept.py),
kept caches, and kept caches with one field planted away watch them at once; once every cache
has seen the API server's current resourceVersions, the states (per-node GPUs, use, holders,
signatures, holdings) and the answers of filter, prioritize and bind's placement for several
pods must be the same for whole and kept, and must differ for each planted drop (a drop the test
could not see would make the comparison prove nothing). Then pods finish, go, come, GPUs are
cordoned, healed and removed (watch events, not LISTs) and the same is checked again.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from kubeacc.contracts.names import DECISION_ANNOTATION, PREFER_ANNOTATION
from kubeacc.contracts.wants import (
    CORES,
    GPU,
    MEMORY,
    UNITS,
    Assigned,
    Decision,
    pod_want,
)
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.extender import kept
from kubeacc.extender.kube import Inventory
from kubeacc.extender.placement import place
from kubeacc.extender.service import Extender
from kubeacc.extender.state import State
from kubeacc.model import Device, Health, HealthState
from tests.crdfixtures import agent_status, kubeacc_cleanup, kubeacc_crds, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

NODES = ("kept-ext-a", "kept-ext-b")
#: The node whose GPUs have no NVLink (PCIe cards, two switches per root): its whole-GPU
#: placement reads ``pciePath`` and ``pcieRoot``; node a's reads ``links``.
PCIE_ONLY = NODES[1]
PCIE_ROOTS = ("pci0000:18", "pci0000:9a")
#: Per socket, the root port and upstream port of each switch: GPUs 0 and 2 (4 and 6) share
#: one, so the closest pair is not the first two free GPUs a placement blind to the
#: switches would take.
PCIE_SWITCHES = (
    (("0000:18:02.0", "0000:19:00.0"), ("0000:18:03.0", "0000:29:00.0")),
    (("0000:9a:02.0", "0000:9b:00.0"), ("0000:9a:03.0", "0000:ab:00.0")),
)
__all__ = ["kubeacc_cleanup", "kubeacc_crds"]  # the fixtures
Keep = Callable[[dict[str, Any]], dict[str, Any]]


def _without(*path: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A planted bug: the kept object without the field at ``path``."""

    def drop(obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        parent = out
        for key in path[:-1]:
            parent = parent.get(key) or {}
        parent.pop(path[-1], None)
        return out

    return drop


#: name -> (accelerator drop, pod drop): each must change what the extender decides.
PLANTED: dict[str, tuple[Keep | None, Keep | None]] = {
    "cordoned": (_without("spec", "cordoned"), None),
    "health": (_without("status", "device", "health"), None),
    "memoryBytes": (_without("status", "device", "memoryBytes"), None),
    "links": (_without("status", "device", "links"), None),
    "pciePath": (_without("status", "device", "pciePath"), None),
    "pcieRoot": (_without("status", "device", "pcieRoot"), None),
    "numaNode": (_without("status", "device", "numaNode"), None),
    "decision": (None, _without("metadata", "annotations")),
    "nodeName": (None, _without("spec", "nodeName")),
    "phase": (None, _without("status", "phase")),
    "containers": (None, _without("spec", "containers")),
}


def _then(first: Keep, then: Keep | None) -> Keep:
    return first if then is None else (lambda obj: then(first(obj)))


def _put_accelerator(
    client: Client, node: str, dev: Device, *, cordoned: bool = False, healthy: bool = True
) -> None:
    name = f"{node}-{dev.name}"
    device = copy.deepcopy(dev)
    if not healthy:
        device.health = Health(state=HealthState.UNHEALTHY, reason="Xid 79")
    if node == PCIE_ONLY:  # PCIe cards: two switches of two GPUs behind one root per socket
        device.links = []
        device.pcie_root = PCIE_ROOTS[device.numa_node]
        port, switch = PCIE_SWITCHES[device.numa_node][device.index % 2]
        device.pcie_path = [port, switch, device.pcie_path[-1]]
    body = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {
            "name": name,
            "labels": {"kubeacc.io/node": node, "example.com/rack": "r7"},
            "annotations": {"example.com/owner": "team-a"},
        },
        "spec": {"node": node, "deviceName": dev.name, "cordoned": cordoned},
    }
    client.patch(Accelerator, name, body, patch_type=PatchType.APPLY, field_manager="test")
    status = agent_status(device)
    client.patch(
        Accelerator.Status,
        name,
        {**body, "status": status},
        patch_type=PatchType.APPLY,
        field_manager="kubeacc-node-agent",
        force=True,
    )


def _pod(
    name: str,
    limits: dict[str, str],
    *,
    node: str | None,
    decision: Decision | None,
    notes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as a Deployment makes them: a GPU container, a sidecar, an init container."""
    annotations = {"example.com/team": "ml", **(notes or {})}
    if decision is not None:
        annotations[DECISION_ANNOTATION] = decision.to_json()
    small = {"cpu": "100m", "memory": "64Mi"}
    spec: dict[str, Any] = {
        "initContainers": [{"name": "fetch", "image": "busybox", "resources": {"limits": small}}],
        "containers": [
            {
                "name": "main",
                "image": "registry.example/infer:1.0",
                "command": ["python", "-m", "serve"],
                "env": [{"name": f"VAR_{i}", "value": "x" * 16} for i in range(6)],
                "resources": {"limits": {"cpu": "4", "memory": "16Gi", **limits}},
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
            },
            {"name": "log", "image": "registry.example/log:1", "resources": {"limits": small}},
        ],
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}, "annotations": annotations},
        "spec": spec,
    }


def _create(client: Client, ns: str, body: dict[str, Any], phase: str = "Running") -> None:
    client.create(Pod.from_dict(body), namespace=ns)  # type: ignore[call-overload]
    name = body["metadata"]["name"]
    client.patch(
        Pod.Status, name, {"status": {"phase": phase}}, namespace=ns, patch_type=PatchType.MERGE
    )


def _decision(
    node: str, *devices: Device, memory: int = 0, cores: int = 0, units: int = 0
) -> Decision:
    bdfs = tuple(d.pci.bus_id for d in devices if d.pci is not None)
    whole = not (memory or cores)
    return Decision(node, (Assigned("main", bdfs, memory, cores, whole, units),))


def _world(client: Client, ns: str, gpus: tuple[Device, ...]) -> None:
    a, b = NODES
    for i, dev in enumerate(gpus):
        _put_accelerator(client, a, dev, cordoned=i == 0, healthy=i != 1)
        _put_accelerator(client, b, dev)
    share = _decision(a, gpus[2], memory=8192, cores=30)
    _create(client, ns, _pod("share", {MEMORY: "8192", CORES: "30"}, node=a, decision=share))
    _create(client, ns, _pod("whole", {GPU: "2"}, node=a, decision=_decision(a, *gpus[3:5])))
    units = _decision(b, *gpus[0:3], units=2000)
    _create(client, ns, _pod("units", {UNITS: "2000"}, node=b, decision=units))
    done = _decision(b, gpus[4], memory=4096)
    _create(client, ns, _pod("done", {MEMORY: "4096"}, node=b, decision=done), "Succeeded")
    elsewhere = _decision(a, gpus[5], memory=4096)  # bound to b: its decision does not count
    _create(client, ns, _pod("elsewhere", {MEMORY: "4096"}, node=b, decision=elsewhere))
    _create(client, ns, _pod("cpu-only", {}, node=b, decision=None))
    _create(client, ns, _pod("pending", {GPU: "1"}, node=None, decision=None), "Pending")


def _events(client: Client, ns: str, gpus: tuple[Device, ...]) -> None:
    """Changes the inventories see as watch events."""
    a, b = NODES
    client.patch(
        Pod.Status,
        "share",
        {"status": {"phase": "Succeeded"}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    client.delete(Pod, "whole", namespace=ns, grace_period=0)
    _create(client, ns, _pod("new", {GPU: "1"}, node=b, decision=_decision(b, gpus[6])))
    _put_accelerator(client, b, gpus[5], cordoned=True)
    _put_accelerator(client, a, gpus[1])  # healthy again
    client.delete(Accelerator, f"{a}-{gpus[7].name}")


def _asked(
    name: str, limits: dict[str, str], notes: dict[str, str] | None = None
) -> dict[str, Any]:
    body = _pod(name, limits, node=None, decision=None, notes=notes)
    body["metadata"].update(namespace="asking", uid=f"uid-{name}")
    return body


ASKED = [
    _asked("share-8g", {MEMORY: "8192"}),
    _asked("share-70g", {MEMORY: "70000", CORES: "50"}),
    _asked("whole-1", {GPU: "1"}),
    _asked("whole-2", {GPU: "2"}),
    _asked("whole-4", {GPU: "4"}),
    _asked("units-1000", {UNITS: "1000"}),
    _asked("prefer", {GPU: "1"}, {PREFER_ANNOTATION: "B200,H100,*"}),
]


def _view(inv: Inventory) -> dict[str, Any]:
    """What the extender decides from ``inv``: state per node, holdings, answers, placements."""
    state = inv.state
    ext = Extender(state)
    out: dict[str, Any] = {
        "nodes": {n: state.summary(n).get("node") for n in NODES},
        "keys": {n: v.keys for n in NODES if (v := state.node(n)) is not None},
        "holdings": sorted(
            (u, d.node, d.containers) for u, d in state.allocs.items() if d.node in NODES
        ),
    }
    for pod in ASKED:
        name = pod["metadata"]["name"]
        args = {"Pod": pod, "NodeNames": list(NODES)}
        out[f"filter {name}"] = ext.filter(args)
        out[f"prioritize {name}"] = ext.prioritize(args)
    # bind's placement (whole GPUs by topology), nothing reserved
    for pod in ASKED:
        for node in NODES:
            view = state.node(node)
            fit = place(view, pod_want(pod)) if view is not None else None
            got = (fit.decision.containers if fit.decision else fit.reason) if fit else None
            out[f"place {pod['metadata']['name']} {node}"] = got
    return out


Versions = tuple[dict[Any, str], dict[Any, str]]


def _ours(objs: list[dict[str, Any]], ns: str) -> dict[Any, str]:
    """This test's objects (its nodes' Accelerators, its namespace's pods) by key: version."""
    return {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for o in objs
        if o["metadata"].get("namespace") == ns
        or o["metadata"]["name"].startswith(tuple(f"{n}-" for n in NODES))
    }


def _versions(inv: Inventory, ns: str) -> Versions:
    return _ours(inv.accelerators.items(), ns), _ours(inv.pods.items(), ns)


def _server(client: Client, ns: str) -> Versions:
    accs = [as_dict(o) for o in client.list(Accelerator)]
    return _ours(accs, ns), _ours([as_dict(o) for o in client.list(Pod, namespace=ns)], ns)


def _settled(
    client: Client, invs: dict[str, Inventory], ns: str, pods: set[str]
) -> dict[str, dict[str, Any]]:
    """The views of every inventory once its caches hold exactly what the API server holds now
    (every write of the test seen, not only the first)."""

    def caught_up() -> bool:
        if not all(i.synced() for i in invs.values()):
            return False
        want = _server(client, ns)
        return {n for (_, n) in want[1]} == pods and all(
            _versions(i, ns) == want for i in invs.values()
        )

    wait_for("every inventory saw every write", caught_up, timeout=60)
    # A cache shows an event only once its wake_if has updated the state (WatchCache._apply),
    # so the views are read once.
    return {name: _view(inv) for name, inv in invs.items()}


@pytest.fixture
def nodes(kube_client: Client) -> Iterator[None]:
    """Node objects for the pods' nodeName (so pod GC does not take them as orphans)."""
    for name in NODES:
        kube_client.create(Node(metadata=ObjectMeta(name=name)))
    yield
    for name in NODES:
        with contextlib.suppress(ApiError):
            kube_client.delete(Node, name)


def test_whole_and_kept_caches_decide_the_same(
    kube_client: Client, namespace: str, nodes: None, dgx: tuple[Device, ...]
) -> None:
    _world(kube_client, namespace, dgx)
    invs = {
        "whole": Inventory(kube_client, State(), keep_accelerator=kept.whole, keep_pod=kept.whole),
        "kept": Inventory(kube_client, State(), page=3),
    }
    for name, (acc, pod) in PLANTED.items():
        invs[name] = Inventory(
            kube_client,
            State(),
            keep_accelerator=_then(kept.accelerator, acc),
            keep_pod=_then(kept.pod, pod),
            page=3,
        )
    for inv in invs.values():
        inv.start()
    try:
        pods = {"share", "whole", "units", "done", "elsewhere", "cpu-only", "pending"}
        listed = _settled(kube_client, invs, namespace, pods)
        _events(kube_client, namespace, dgx)
        watched = _settled(kube_client, invs, namespace, pods - {"whole"} | {"new"})
        for inv in invs.values():
            assert inv.accelerators.lists == 1 and inv.pods.lists == 1  # events, not LISTs
        kept_pod = invs["kept"].pods.get("units", namespace)
        kept_acc = invs["kept"].accelerators.get(f"{NODES[0]}-{dgx[0].name}")
    finally:
        for inv in invs.values():
            inv.close()
    # the caches were what they say: whole objects, or only the kept fields
    assert kept_pod is not None and kept_acc is not None
    assert "image" not in kept_pod["spec"]["containers"][0]
    assert "lastSeen" not in kept_acc["status"]
    whole_pod = invs["whole"].pods.get("units", namespace)
    assert whole_pod is not None and "image" in whole_pod["spec"]["containers"][0]
    # every case did its part, else the comparison proves nothing
    base = listed["whole"]
    assert [h[0] for h in base["holdings"]] and len(base["holdings"]) == 3, base["holdings"]
    gpus_a = base["nodes"][NODES[0]]["gpus"]
    assert sum(not g["available"] for g in gpus_a.values()) == 2
    assert base != watched["whole"]
    for key in base:
        assert listed["kept"][key] == base[key], f"listed: {key}"
    for key in watched["whole"]:
        assert watched["kept"][key] == watched["whole"][key], f"watched: {key}"
    for name in PLANTED:
        assert listed[name] != base or watched[name] != watched["whole"], (
            f"dropping {name} changes nothing the test sees"
        )
