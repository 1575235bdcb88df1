"""pytest fixtures for tests that run against the real testbed cluster.

* ``testbed`` (session): one cluster with a kubelet on node ``node-a``; builds the binaries first
  when they are missing (slow the first time). A failed build or start fails the test loudly with
  the build log or the component logs; it never skips.
* ``multinode_testbed`` (session): a second cluster with four kubelets of different shapes
  (``kubeacc.testbed.shapes.MULTINODE_SHAPES``: gpu-server, fpga-node, kunlun-node, edge-node);
  started only when a test asks for it, so the single-node ``testbed`` stays as fast as before.
* ``runtime_testbed`` (session): a one-node cluster (``node-r``) whose kubelet runs on the real
  runtime (containerd + runc + CNI, kubeacc.testbed.runtime): containers really run. Started
  only when a test asks for it. ``runtime_namespace``: a fresh namespace there.
* ``volcano_testbed`` (session): seven kubelets (``kubeacc.testbed.shapes.VOLCANO_SHAPES``) on a
  cluster of their own that also runs
  Volcano's scheduler and controller manager (``kubeacc.testbed.volcano``, built from the
  pinned source first when missing); ``volcano_namespace``: a fresh namespace there.
* ``kube_client``: an admin lightkube client.
* ``namespace``: a fresh namespace whose ``default`` service account exists;
  ``multinode_namespace`` the same on the multi-node cluster.
* every test that uses a cluster (marked ``cluster``; tests using these fixtures are marked
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
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.shapes import VOLCANO_SHAPES, multinode_options
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
_MULTINODE_FIXTURES = {"multinode_testbed", "multinode_namespace"}
_RUNTIME_FIXTURES = {"runtime_testbed", "runtime_namespace"}
_VOLCANO_FIXTURES = {"volcano_testbed", "volcano_namespace"}
_PROTECTED_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}

_CLUSTER_FIXTURES = {
    "testbed",
    "kube_client",
    "namespace",
    "multinode_testbed",
    "multinode_namespace",
    "runtime_testbed",
    "runtime_namespace",
    "volcano_testbed",
    "volcano_namespace",
}
_started: list[Testbed] = []
_state = {"failed": False}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if _CLUSTER_FIXTURES.intersection(names):
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
    yield from _session_testbed(None)


@pytest.fixture(scope="session")
def multinode_testbed() -> Iterator[Testbed]:
    """A cluster whose four Nodes each run a real kubelet (see kubeacc.testbed.shapes)."""
    yield from _session_testbed(multinode_options())


@pytest.fixture(scope="session")
def runtime_testbed() -> Iterator[Testbed]:
    """A one-node cluster on the real container runtime (containerd + runc)."""
    yield from _session_testbed([KubeletOptions(node_name="node-r", runtime="containerd")])


@pytest.fixture(scope="session")
def volcano_testbed() -> Iterator[Testbed]:
    """The multi-node shapes with Volcano's scheduler and controller manager beside
    kube-scheduler."""
    yield from _session_testbed(multinode_options(VOLCANO_SHAPES), volcano=True)


def _session_testbed(
    nodes: list[KubeletOptions] | None, volcano: bool = False
) -> Iterator[Testbed]:
    failure = ""
    try:
        # Build progress goes to the real stderr: a cold build takes minutes and pytest would
        # otherwise hold the output back until the fixture finished.
        tb = Testbed.start(
            nodes=nodes,
            keep=os.environ.get("KUBEACC_TESTBED_KEEP") == "1",
            out=sys.__stderr__ or sys.stderr,
            volcano=volcano,
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
    names = set(getattr(request, "fixturenames", ()))
    # A cluster test that starts its own cluster (e.g. runs `kubeacc demo`) needs no cleanup
    # and must not start the session's testbed for nothing.
    if request.node.get_closest_marker("cluster") is None or not _CLUSTER_FIXTURES & names:
        yield
        return
    if _MULTINODE_FIXTURES & names:
        which = "multinode_testbed"
    elif _VOLCANO_FIXTURES & names:
        which = "volcano_testbed"
    elif _RUNTIME_FIXTURES & names:
        which = "runtime_testbed"
    else:
        which = "testbed"
    tb: Testbed = request.getfixturevalue(which)
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
    yield from _fresh_namespace(testbed, kube_client, request)


@pytest.fixture
def multinode_namespace(
    multinode_testbed: Testbed, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace on the multi-node cluster (deleted afterwards)."""
    client = multinode_testbed.client(field_manager="kubeacc-test")
    yield from _fresh_namespace(multinode_testbed, client, request)


@pytest.fixture
def volcano_namespace(volcano_testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the Volcano cluster (deleted afterwards)."""
    client = volcano_testbed.client(field_manager="kubeacc-test")
    yield from _fresh_namespace(volcano_testbed, client, request)


@pytest.fixture
def runtime_namespace(runtime_testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the real-runtime cluster (deleted afterwards)."""
    client = runtime_testbed.client(field_manager="kubeacc-test")
    yield from _fresh_namespace(runtime_testbed, client, request)


def _fresh_namespace(tb: Testbed, client: Client, request: pytest.FixtureRequest) -> Iterator[str]:
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    client.create(Namespace(metadata=ObjectMeta(name=name)))
    tb.wait_service_account(name)
    yield name
    with contextlib.suppress(ApiError):
        client.delete(Namespace, name)
