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
from kubeacc.agent.dra.devicestatus import DeviceStatusWriter
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.testbed import Testbed
from tests.nodestack import resource_claim

pytestmark = pytest.mark.cluster

POOL, DEVICE = "node-x", "gpu-0"


class CountingClient(Client):
    """The real client, counting its reads and patches."""

    gets = 0
    patches = 0

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        return super().get(*args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        self.patches += 1
        return super().patch(*args, **kwargs)


def entry(reason: str, pool: str = POOL) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": reason,
        "message": "",
        "lastTransitionTime": "2026-11-27T00:00:00Z",
    }
    return {"driver": "kubeacc.io", "pool": pool, "device": DEVICE, "conditions": [condition]}


def set_to(reason: str) -> Any:
    return lambda data: [entry(reason)]


def reasons(client: Client, ns: str) -> list[str]:
    claim = as_dict(client.get(ResourceClaim, "c", namespace=ns))
    return [d["conditions"][0]["reason"] for d in claim["status"].get("devices") or []]


def allocated_claim(kube_client: Client, ns: str, pool: str = POOL) -> dict[str, Any]:
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}]
    kube_client.create(resource_claim("c", ns, requests))
    result = {"request": "gpu", "driver": "kubeacc.io", "pool": pool, "device": DEVICE}
    kube_client.patch(
        ResourceClaim.Status,
        "c",
        {"status": {"allocation": {"devices": {"results": [result]}}}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    return as_dict(kube_client.get(ResourceClaim, "c", namespace=ns))


def test_a_current_copy_saves_the_read_and_a_stale_one_is_read_again(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    ns = namespace
    current = allocated_claim(kube_client, ns)
    client = CountingClient(KubeConfig.from_file(testbed.kubeconfig), field_manager="test")
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


class StaleWatch:
    """Stands for the agent's claim watch when its copy lags behind (events not yet in)."""

    def __init__(self, copy: dict[str, Any] | None) -> None:
        self.copy = copy

    def cached(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self.copy


def test_the_writer_starts_from_its_own_answer_and_sends_nothing_already_so(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    ns = namespace
    before = allocated_claim(kube_client, ns)
    uid = before["metadata"]["uid"]
    client = CountingClient(KubeConfig.from_file(testbed.kubeconfig), field_manager="test")
    watch = StaleWatch(before)  # never sees our writes
    writer = DeviceStatusWriter(client, POOL, claims=watch)  # type: ignore[arg-type]

    def prepared(since: str) -> list[dict[str, Any]]:
        e = entry("Prepared")
        e["conditions"][0]["lastTransitionTime"] = since
        return [e]

    def counts() -> tuple[int, int]:
        return client.gets, client.patches

    writer.write(ns, "c", uid, prepared("2026-11-27T10:00:00Z"))
    assert counts() == (0, 1)  # from the watch's copy, current then
    assert reasons(kube_client, ns) == ["Prepared"]

    # Unprepared: the watch's copy is stale now, the server's answer to the write is not.
    writer.write(ns, "c", uid, [])
    assert counts() == (0, 2)
    assert reasons(kube_client, ns) == []
    # Unprepared again: none of ours there, nothing sent.
    writer.write(ns, "c", uid, [])
    assert counts() == (0, 2)

    writer.write(ns, "c", uid, prepared("2026-11-27T11:00:00Z"))
    assert counts() == (0, 3)
    # Prepared again, before an unprepare's write went out: Ready since 11:00 stays so.
    writer.write(ns, "c", uid, prepared("2026-11-27T12:00:00Z"))
    assert counts() == (0, 3)
    [on_server] = as_dict(kube_client.get(ResourceClaim, "c", namespace=ns))["status"]["devices"]
    assert on_server["conditions"][0]["lastTransitionTime"] == "2026-11-27T11:00:00Z"

    # Someone else changes our entry: the watch shows a newer copy than our answer, so the
    # writer does not trust its own; a copy of the watch is confirmed by a read.
    theirs = entry("Edited")
    kube_client.patch(
        ResourceClaim.Status,
        "c",
        {"status": {"devices": [theirs]}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    watch.copy = as_dict(kube_client.get(ResourceClaim, "c", namespace=ns))
    writer.write(ns, "c", uid, prepared("2026-11-27T13:00:00Z"))
    assert counts() == (0, 4)
    assert reasons(kube_client, ns) == ["Prepared"]

    # The claim deleted: the answer the writer keeps does not make it write (or fail).
    kube_client.delete(ResourceClaim, "c", namespace=ns)
    writer.write(ns, "c", uid, [])
    assert counts() == (0, 5)  # one guarded patch, whether the claim is gone or going
