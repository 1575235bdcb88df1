"""The guarded ``status.devices`` write (kubeacc.agent.dra.claimpatch) against the real API
server: a write that starts from a current copy of the claim (the agent's watch) is one request;
a stale copy fails the guard, and the claim is read and written right."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.dra.claimpatch import patch_devices
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.testbed import Testbed
from tests.nodestack import resource_claim

pytestmark = pytest.mark.cluster

POOL, DEVICE = "node-x", "gpu-0"


class CountingClient(Client):
    """The real client, counting its reads."""

    gets = 0

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        return super().get(*args, **kwargs)


def entry(reason: str) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": reason,
        "message": "",
        "lastTransitionTime": "2026-11-27T00:00:00Z",
    }
    return {"driver": "kubeacc.io", "pool": POOL, "device": DEVICE, "conditions": [condition]}


def set_to(reason: str) -> Any:
    return lambda data: [entry(reason)]


def reasons(client: Client, ns: str) -> list[str]:
    claim = as_dict(client.get(ResourceClaim, "c", namespace=ns))
    return [d["conditions"][0]["reason"] for d in claim["status"].get("devices") or []]


def test_a_current_copy_saves_the_read_and_a_stale_one_is_read_again(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    ns = namespace
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}]
    kube_client.create(resource_claim("c", ns, requests))
    result = {"request": "gpu", "driver": "kubeacc.io", "pool": POOL, "device": DEVICE}
    kube_client.patch(
        ResourceClaim.Status,
        "c",
        {"status": {"allocation": {"devices": {"results": [result]}}}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    client = CountingClient(KubeConfig.from_file(testbed.kubeconfig), field_manager="test")

    current = as_dict(kube_client.get(ResourceClaim, "c", namespace=ns))
    client.gets = 0
    assert patch_devices(client, ns, "c", set_to("A"), "test", current)
    assert client.gets == 0  # one request: the guarded patch
    assert reasons(kube_client, ns) == ["A"]

    # `current` is stale now: the guard fails, the claim is read and the write made on it.
    assert patch_devices(client, ns, "c", set_to("B"), "test", current)
    assert client.gets == 1
    assert reasons(kube_client, ns) == ["B"]

    # A stale copy that already shows what is wanted is not trusted: the server still has B.
    client.gets = 0
    assert patch_devices(client, ns, "c", set_to("A"), "test", current)
    assert client.gets == 1
    assert reasons(kube_client, ns) == ["A"]

    # A stale copy the change leaves alone is not trusted either: the server decides.
    client.gets = 0
    fresh_only = lambda data: None if data is current else [entry("C")]  # noqa: E731
    assert patch_devices(client, ns, "c", fresh_only, "test", current)
    assert client.gets == 1
    assert reasons(kube_client, ns) == ["C"]
