"""pytest fixtures for tests that run against the real testbed cluster.

* ``testbed`` (session): one cluster with a kubelet on node ``node-a``; builds the binaries first
  when they are missing (slow the first time). A failed build or start fails the test loudly with
  the build log or the component logs; it never skips.
* ``kube_client``: an admin lightkube client.
* ``namespace``: a fresh namespace whose ``default`` service account exists.
* every test that uses the cluster (marked ``cluster``; tests using ``testbed`` are marked
  automatically) is followed by a cleanup that deletes the namespaces, CRDs, DeviceClasses and
  ResourceSlices it created, and the pods and claims it left in ``default``.

Environment: ``KUBEACC_TESTBED_KEEP=1`` keeps the work directory (logs, etcd data) after the
session; it is also kept when any test failed, and its path is printed at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.core.resource import GlobalResource, NamespacedResource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from kubeacc.testbed.build import BuildError
from kubeacc.testbed.testbed import Testbed

_GLOBAL_KINDS: tuple[type[GlobalResource], ...] = (
    Namespace,
    CustomResourceDefinition,
    DeviceClass,
    ResourceSlice,
)
_DEFAULT_NS_KINDS: tuple[type[NamespacedResource], ...] = (
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
)
_PROTECTED_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}

_started: list[Testbed] = []
_state = {"failed": False}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "testbed" in names or "kube_client" in names or "namespace" in names:
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and item.get_closest_marker("cluster") is not None:
        _state["failed"] = True
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for tb in _started:
        if tb.keep:
            terminalreporter.write_line(f"testbed work directory kept: {tb.workdir} (logs: logs/)")


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """The session's cluster (etcd, apiserver, scheduler, controller manager, kubelet)."""
    failure = ""
    try:
        # Build progress goes to the real stderr: a cold build takes minutes and pytest would
        # otherwise hold the output back until the fixture finished.
        tb = Testbed.start(
            keep=os.environ.get("KUBEACC_TESTBED_KEEP") == "1", out=sys.__stderr__ or sys.stderr
        )
    except BuildError as exc:
        failure = f"building the testbed failed:\n{exc}"
    except Exception as exc:
        failure = f"starting the testbed failed: {exc}"
    if failure:
        pytest.fail(failure, pytrace=False)
    _started.append(tb)
    try:
        yield tb
    finally:
        if _state["failed"]:
            tb.keep = True
        tb.stop()


def _names(client: Client, kind: Any, namespace: str | None = None) -> set[str]:
    objs = client.list(kind, namespace=namespace) if namespace else client.list(kind)
    return {o.metadata.name for o in objs if o.metadata and o.metadata.name}


@pytest.fixture(autouse=True)
def _cluster_cleanup(request: pytest.FixtureRequest) -> Iterator[None]:
    """Delete what a cluster test created (see the module doc)."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    tb: Testbed = request.getfixturevalue("testbed")
    client = tb.client(field_manager="kubeacc-test-cleanup")
    before_global = {k: _names(client, k) for k in _GLOBAL_KINDS}
    before_default = {k: _names(client, k, "default") for k in _DEFAULT_NS_KINDS}
    yield
    errors: list[str] = []
    for kind, names in before_global.items():
        for name in sorted(_names(client, kind) - names):
            if kind is Namespace and name in _PROTECTED_NAMESPACES:
                continue
            _delete(client, kind, name, None, errors)
    for nkind, names in before_default.items():
        for name in sorted(_names(client, nkind, "default") - names):
            _delete(client, nkind, name, "default", errors)
    if errors:
        pytest.fail("cleanup failed: " + "; ".join(errors), pytrace=False)


def _delete(client: Client, kind: Any, name: str, namespace: str | None, errors: list[str]) -> None:
    try:
        if namespace:
            client.delete(kind, name, namespace=namespace, grace_period=0)
        else:
            client.delete(kind, name)
    except ApiError as exc:
        if exc.status.code != 404:
            errors.append(f"{kind.__name__} {name}: {exc}")


@pytest.fixture
def kube_client(testbed: Testbed) -> Client:
    """An admin lightkube client for the session's cluster."""
    return testbed.client(field_manager="kubeacc-test")


@pytest.fixture
def namespace(
    testbed: Testbed, kube_client: Client, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace (deleted afterwards) in which pods can be created right away."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    kube_client.create(Namespace(metadata=ObjectMeta(name=name)))
    testbed.wait_service_account(name)
    yield name
    with contextlib.suppress(ApiError):
        kube_client.delete(Namespace, name)
