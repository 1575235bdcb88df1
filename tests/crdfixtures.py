"""Shared fixtures for tests of the kubeacc.io custom resources (imported by conftest files)."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.controller.controller import Controller
from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.crds.api import API_VERSION, NODE_LABEL
from kubeacc.crds.manifests import crds
from kubeacc.crds.resources import (
    Accelerator,
    AcceleratorOperation,
    AcceleratorPolicy,
    as_dict,
    install_crds,
)
from kubeacc.crds.types import AcceleratorStatus
from kubeacc.model import Device
from kubeacc.node.nodelabels import accelerator_labels
from kubeacc.testbed.testbed import Testbed

from .testbed.helpers import eventually


@pytest.fixture(scope="session")
def kubeacc_crds(testbed: Testbed) -> None:
    """The kubeacc.io CRDs, installed once per session.

    Session scope matters: the testbed's per-test cleanup deletes CRDs a *test* created, and a
    session fixture runs before that snapshot is taken.
    """
    install_crds(testbed.client(field_manager="kubeacc-test-crds"))


@contextlib.contextmanager
def deleting_new_kubeacc_objects(client: Client) -> Iterator[None]:
    """Delete the cluster-scoped kubeacc.io objects created inside the block."""

    def names(kind: Any) -> set[str]:
        return {o.metadata.name for o in client.list(kind) if o.metadata}

    before = {k: names(k) for k in (Accelerator, AcceleratorPolicy)}
    yield
    for kind, old in before.items():
        for name in names(kind) - old:
            with contextlib.suppress(ApiError):
                client.delete(kind, name)


@pytest.fixture
def kubeacc_cleanup(kube_client: Client) -> Iterator[None]:
    """Delete the cluster-scoped kubeacc.io objects a test created."""
    with deleting_new_kubeacc_objects(kube_client):
        yield


def put_accelerator(
    client: Client,
    node: str,
    device: Device,
    allocated_to: list[dict[str, str]] | None = None,
) -> str:
    """Create an Accelerator as an admin would (spec, then status through the subresource),
    labelled as the node agent labels it."""
    name = f"{node}-{device.name}"
    body = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {"name": name, "labels": accelerator_labels(node, device)},
        "spec": {"node": node, "deviceName": device.name},
    }
    client.patch(Accelerator, name, body, patch_type=PatchType.APPLY, field_manager="test")
    status = AcceleratorStatus(device=device).to_api()
    status["allocatedTo"] = allocated_to or []
    client.patch(
        Accelerator.Status,
        name,
        {**body, "status": status},
        patch_type=PatchType.APPLY,
        field_manager="test",
        force=True,
    )
    return name


#: The time the realistic objects below carry (``lastSeen``, conditions).
T0 = "2026-01-01T00:00:00Z"


def agent_status(device: Device, **more: Any) -> dict[str, Any]:
    """An Accelerator's status as the life-cycle agent writes it (device, host driver,
    lastSeen, Present condition), with ``more`` fields over it."""
    present = {"type": "Present", "status": "True", "reason": "Discovered", "message": ""}
    return {
        "device": device.to_json_dict(),
        "hostDriver": "nvidia",
        "lastSeen": T0,
        "allocatedTo": [],
        "conditions": [{**present, "lastTransitionTime": T0}],
        **more,
    }


def put_policy(client: Client, name: str, spec: dict[str, Any]) -> None:
    """Create or change an AcceleratorPolicy as an admin would."""
    client.patch(
        AcceleratorPolicy,
        name,
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": name},
            "spec": spec,
        },
        patch_type=PatchType.APPLY,
        field_manager="test",
        force=True,
    )


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30) -> Any:
    """:func:`tests.testbed.helpers.eventually` with the description first."""
    return eventually(fn, timeout, what)


def create_operation(client: Client, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.create(
        AcceleratorOperation(
            {"apiVersion": API_VERSION, "kind": "AcceleratorOperation"},
            metadata={"name": name, "namespace": ns},
            spec=spec,
        ),
        namespace=ns,
    )


def permissive_operation_crd() -> dict[str, Any]:
    """The AcceleratorOperation CRD with a spec that takes anything (as a CRD from before the
    schema and its rules): what an old or hand-edited cluster lets in."""
    crd = copy.deepcopy(
        next(c for c in crds() if c["spec"]["names"]["kind"] == "AcceleratorOperation")
    )
    for version in crd["spec"]["versions"]:
        props = version["schema"]["openAPIV3Schema"]["properties"]
        props["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


@contextlib.contextmanager
def permissive_operations(namespace: str) -> Iterator[tuple[Testbed, Client]]:
    """A testbed of its own whose AcceleratorOperation CRD takes any spec
    (:func:`permissive_operation_crd`), with ``namespace`` created; and a client of it."""
    with Testbed.start(with_kubelet=False) as tb:
        client = tb.client(field_manager="kubeacc-test")
        install_crds(client)
        client.patch(
            CustomResourceDefinition,
            "acceleratoroperations.kubeacc.io",
            permissive_operation_crd(),
            patch_type=PatchType.APPLY,
            field_manager="kubeacc",
            force=True,
        )
        client.create(Namespace(metadata=ObjectMeta(name=namespace)))
        yield tb, client


def create_operation_eventually(client: Client, ns: str, name: str, spec: Any) -> None:
    """:func:`create_operation`, retried while the API server still applies the CRD's schema
    from before :func:`permissive_operations` replaced it."""

    def created() -> bool:
        try:
            create_operation(client, ns, name, spec)
        except ApiError as exc:
            assert exc.status.code == 422, exc
            time.sleep(0.2)
            return False
        return True

    wait_for(f"operation {name} created", created, 30)


def operation_finished(client: Client, ns: str, name: str) -> dict[str, Any] | None:
    """The operation once it is Succeeded or Failed, else None (a probe for wait_for)."""
    obj = as_dict(client.get(AcceleratorOperation, name, namespace=ns))
    return obj if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None


def wait_until_no_claim_holds(client: Client, node: str, timeout: float = 120) -> None:
    """Wait until no reserved ResourceClaim holds a kubeacc.io device of ``node``: a previous
    test's claims (namespace still being deleted) would make the devices "in use"."""

    def free() -> bool:
        for c in client.list(ResourceClaim, namespace="*"):
            status = as_dict(c).get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            if status.get("reservedFor") and any(
                r.get("driver") == "kubeacc.io" and r.get("pool") == node for r in results
            ):
                return False
        return True

    eventually(free, timeout, f"no claim holding a device of {node}")


def make_controller(testbed: Testbed) -> Controller:
    """A controller with a Lease of its own, so tests never share a leader."""
    return Controller(
        testbed.client(field_manager="kubeacc-controller"),
        identity=f"test-{uuid.uuid4().hex[:6]}",
        lease_namespace="default",
        lease_name=f"kubeacc-test-{uuid.uuid4().hex[:6]}",
        interval=0.3,
        admin_namespaces=[ANY_NAMESPACE],  # tests run operations from their own namespaces
    )


class Runnable(Protocol):
    def run(self, stop: threading.Event) -> None: ...


@contextlib.contextmanager
def running(*components: Runnable, join: float = 10) -> Iterator[list[threading.Thread]]:
    """Run controllers / life-cycle agents on threads; stop them and join when the block ends."""
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in components]
    for t in threads:
        t.start()
    try:
        yield threads
    finally:
        stop.set()
        for t in threads:
            t.join(join)


def resource_slice(name: str, node: str, driver: str = "kubeacc.io") -> Any:
    """A one-device ResourceSlice of ``node``'s pool, as a node agent would write it."""
    from lightkube.codecs import from_dict

    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0000-3b-00-0"}],
            },
        }
    )


def delete_node_accelerators(client: Client, node: str) -> None:
    """Delete the Accelerators of ``node`` and the controller Lease a CLI test left."""
    from lightkube.resources.coordination_v1 import Lease

    for a in client.list(Accelerator, labels={NODE_LABEL: node}):
        with contextlib.suppress(ApiError):
            client.delete(Accelerator, a.metadata.name if a.metadata else "")
    with contextlib.suppress(ApiError):
        client.delete(Lease, "kubeacc-controller", namespace="default")
