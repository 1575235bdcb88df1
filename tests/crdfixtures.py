"""Shared fixtures for tests of the kubeacc.io custom resources (imported by conftest files)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from lightkube import ApiError, Client
from lightkube.types import PatchType

from kubeacc.crds.resources import (
    Accelerator,
    AcceleratorOperation,
    AcceleratorPolicy,
    install_crds,
)
from kubeacc.crds.types import API_VERSION, NODE_LABEL, AcceleratorStatus
from kubeacc.model import Device
from kubeacc.testbed.testbed import Testbed

from .testbed.helpers import eventually


@pytest.fixture(scope="session")
def kubeacc_crds(testbed: Testbed) -> None:
    """The kubeacc.io CRDs, installed once per session.

    Session scope matters: the testbed's per-test cleanup deletes CRDs a *test* created, and a
    session fixture runs before that snapshot is taken.
    """
    install_crds(testbed.client(field_manager="kubeacc-test-crds"))


@pytest.fixture
def kubeacc_cleanup(kube_client: Client) -> Iterator[None]:
    """Delete the cluster-scoped kubeacc.io objects a test created."""

    def names(kind: Any) -> set[str]:
        return {o.metadata.name for o in kube_client.list(kind) if o.metadata}

    before = {k: names(k) for k in (Accelerator, AcceleratorPolicy)}
    yield
    for kind, old in before.items():
        for name in names(kind) - old:
            with contextlib.suppress(ApiError):
                kube_client.delete(kind, name)


def put_accelerator(
    client: Client,
    node: str,
    device: Device,
    allocated_to: list[dict[str, str]] | None = None,
) -> str:
    """Create an Accelerator as an admin would (spec, then status through the subresource)."""
    name = f"{node}-{device.name}"
    body = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {"name": name, "labels": {NODE_LABEL: node}},
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
