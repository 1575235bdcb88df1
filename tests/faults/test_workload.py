"""The fault runner's workload on the shared testbed: what a create cut off by an API error
leaves is deleted at the end of a run (a claim made without its pod stayed for good before)."""

from __future__ import annotations

import random
import time

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceClaim

from tests.faults.workload import Workload, kind_claim

pytestmark = pytest.mark.cluster


def test_a_create_cut_off_between_its_claim_and_its_pod_is_cleaned_up(
    kube_client: Client, namespace: str
) -> None:
    workload = Workload(kube_client, namespace, random.Random(1), ("gpu",))
    # the claim made, then the pod's create answered by an API error: the step stays pending
    kube_client.create(kind_claim("gpu", "w1-gpu", namespace))
    workload._pending = ("create", "w1-gpu")
    assert workload.live == []

    workload.delete_all()
    deadline = time.monotonic() + 30
    while not workload.drained() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert list(kube_client.list(ResourceClaim, namespace=namespace)) == []
    assert workload.drained()
