"""The shared real-runtime chart cluster put back as a fresh one after a test.

What a chart test may leave: namespaces with running workloads (their claims prepared by the
agent), the release itself, cluster-wide objects (CRDs, cluster roles, DeviceClasses, admission
policies, ResourceSlices) and node labels. The order matters: the workloads go first, while the
agent still runs, so the kubelet unprepares their claims; only then the release. A step that
does not finish raises :class:`ResetError`: the fixture then throws the cluster away.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightkube import ApiError, Client
from lightkube.core.resource import GlobalResource
from lightkube.resources.admissionregistration_v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice

from kubeacc.testbed import Testbed
from kubeacc.testbed.withkubeacc import NAMESPACE, RELEASE, Helm

#: Cluster-wide kinds a chart test creates (the chart's own, and what its workloads make).
GLOBAL_KINDS: tuple[type[GlobalResource], ...] = (
    CustomResourceDefinition,
    ClusterRole,
    ClusterRoleBinding,
    DeviceClass,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    ResourceSlice,
)
TIMEOUT = 240.0


class ResetError(RuntimeError):
    """The cluster could not be put back; the message says which step and what was left."""


@dataclass(frozen=True)
class Snapshot:
    """What the cluster held before a test: names by kind, and the node's labels."""

    names: dict[type[GlobalResource], frozenset[str]]
    labels: dict[str, str]

    @classmethod
    def take(cls, tb: Testbed) -> Snapshot:
        client = tb.client(field_manager="kubeacc-test-reset")
        kinds = (Namespace, *GLOBAL_KINDS)
        return cls({k: _names(client, k) for k in kinds}, _labels(client, tb))


def reset(tb: Testbed, helm: Helm, before: Snapshot) -> None:
    """Delete what the test added since ``before``; raise :class:`ResetError` if it stays."""
    client = tb.client(field_manager="kubeacc-test-reset")
    added = sorted(_names(client, Namespace) - before.names[Namespace] - {NAMESPACE})
    for ns in added:
        # their pods first, each by its own grace period (the kubelet stops the containers and
        # unprepares the claims while the agent still runs); the namespace then goes quickly
        for pod in client.list(Pod, namespace=ns):
            if pod.metadata and pod.metadata.name:
                _delete(client, Pod, pod.metadata.name, ns)
        _delete(client, Namespace, ns)
    _wait(lambda: not set(added) & _names(client, Namespace), f"namespaces {added} deleted")
    if helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
        done = helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=4m", check=False)
        if done.returncode != 0:
            raise ResetError(f"helm uninstall failed:\n{done.stdout}\n{done.stderr}")
    if NAMESPACE in _names(client, Namespace) - before.names[Namespace]:
        _delete(client, Namespace, NAMESPACE)  # with hook Pods helm leaves (`helm test`)
        _wait(lambda: NAMESPACE not in _names(client, Namespace), f"namespace {NAMESPACE}")
    for kind in GLOBAL_KINDS:
        left = _names(client, kind) - before.names[kind]
        for name in sorted(left):
            _delete(client, kind, name)
        _wait(lambda k=kind, n=left: not n & _names(client, k), f"{kind.__name__} {sorted(left)}")
    extra = {k: None for k in _labels(client, tb).keys() - before.labels.keys()}
    changed = {k: v for k, v in before.labels.items() if _labels(client, tb).get(k) != v}
    if extra or changed:
        patch: dict[str, Any] = {"metadata": {"labels": {**extra, **changed}}}
        client.patch(Node, tb.kubelet.node_name, patch)


def _names(client: Client, kind: Any) -> frozenset[str]:
    return frozenset(o.metadata.name for o in client.list(kind) if o.metadata and o.metadata.name)


def _labels(client: Client, tb: Testbed) -> dict[str, str]:
    meta = client.get(Node, tb.kubelet.node_name).metadata
    return dict((meta.labels if meta else None) or {})


def _delete(client: Client, kind: Any, name: str, namespace: str | None = None) -> None:
    try:
        if namespace:
            client.delete(kind, name, namespace=namespace)
        else:
            client.delete(kind, name)
    except ApiError as exc:
        if exc.status.code != 404:
            raise ResetError(f"deleting {kind.__name__} {name}: {exc}") from exc


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done():
        if time.monotonic() > deadline:
            raise ResetError(f"{what}: not done after {TIMEOUT:.0f} s")
        time.sleep(1)
