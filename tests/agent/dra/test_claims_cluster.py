"""The agent's claim watch (kubeacc.agent.dra.claims) on the real API server: a change of a
claim allocated here is reported, a change of its ``status.devices`` alone (the agent's own
device-status writes) is not."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.dra.claims import WatchingClaimSource
from tests.agent.dra.test_claimpatch_cluster import allocated_claim, entry
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def test_a_status_devices_write_is_no_change_of_the_claim(
    kube_client: Client, namespace: str
) -> None:
    ns = namespace
    pool = f"node-{ns}"  # the watch sees every namespace: no other test's claims in this pool
    uid = allocated_claim(kube_client, ns, pool)["metadata"]["uid"]
    changes: list[int] = []
    watch = WatchingClaimSource(kube_client, pool, on_change=lambda: changes.append(1))
    watch.start()
    try:

        def seen(check: Any) -> bool:
            copy = watch.cached(ns, "c", uid)
            return copy is not None and check(copy)

        eventually(lambda: seen(lambda c: True), 30, "the claim in the watch")
        assert len(changes) == 1  # first seen

        kube_client.patch(
            ResourceClaim.Status,
            "c",
            {"status": {"devices": [entry("Prepared", pool)]}},
            namespace=ns,
            patch_type=PatchType.MERGE,
        )
        kube_client.patch(
            ResourceClaim,
            "c",
            {"metadata": {"annotations": {"example.com/note": "x"}}},
            namespace=ns,
            patch_type=PatchType.MERGE,
        )
        # events arrive in order: once the annotation is in, the devices write was seen before
        eventually(lambda: seen(lambda c: "annotations" in c["metadata"]), 30, "the annotation")
        assert seen(lambda c: c["status"].get("devices"))
        assert len(changes) == 2  # the annotation; not the status.devices write
    finally:
        watch.stop()
