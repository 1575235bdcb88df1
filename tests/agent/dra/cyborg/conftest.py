"""A Cyborg backend of the tests' Cyborg cloud and a DRA driver on it (claims from memory: these
tests are about what kube-acc asks of Cyborg and Placement, not about the kubelet)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeacc.agent.dra.cyborg.backend import CyborgBackend
from kubeacc.agent.dra.devices import device_index
from kubeacc.agent.dra.driver import Driver
from kubeacc.node.cyborg.client import Credentials
from kubeacc.testbed.cyborgcloud import CyborgCloud
from tests.agent.dra.memclaims import Claims
from tests.conftest import CYBORG_NODE

#: Keystone's IDs are UUIDs without dashes; Cyborg checks the project's form.
PROJECT = "6f7a1c2e9b5d4e3fa0b1c2d3e4f5a6b7"
USER = "0a1b2c3d4e5f40718293a4b5c6d7e8f9"


def credentials(cloud: CyborgCloud) -> Credentials:
    """What the agent's Secret holds for the test cloud (identity headers, no Keystone)."""
    return Credentials(
        cyborg_url=cloud.cyborg_url,
        placement_url=cloud.placement_url,
        token="admin",
        project_id=PROJECT,
        user_id=USER,
    )


def events_address(cloud: CyborgCloud) -> tuple[str, int]:
    url = urllib.parse.urlsplit(cloud.nova_url)
    assert url.port is not None
    return ("127.0.0.1", url.port)


@pytest.fixture
def backend(cyborg_cloud: CyborgCloud, tmp_path: Path) -> Iterator[CyborgBackend]:
    b = CyborgBackend(
        credentials(cyborg_cloud),
        CYBORG_NODE,
        tmp_path / "state",
        events_address(cyborg_cloud),
        bind_timeout=30,
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()
        leftover(cyborg_cloud, delete=True)


def leftover(cloud: CyborgCloud, *, delete: bool = False) -> dict[str, Any]:
    """The ARQs and Placement allocations on the cloud now (deleted with ``delete``, so that
    one test's failure does not fail the next)."""
    arqs = cloud.cyborg("GET", "/v2/accelerator_requests")["arqs"]
    allocations: dict[str, Any] = {}
    for rp in cloud.placement("GET", "/resource_providers")["resource_providers"]:
        got = cloud.placement("GET", f"/resource_providers/{rp['uuid']}/allocations")
        allocations.update(got["allocations"])
    if delete:
        for a in arqs:
            cloud.cyborg("DELETE", f"/v2/accelerator_requests?arqs={a['uuid']}")
        for consumer in allocations:
            cloud.placement("DELETE", f"/allocations/{consumer}")
    return {"arqs": arqs, "allocations": allocations}


def cyborg_driver(tmp: Path, claims: Claims, backend: CyborgBackend) -> Driver:
    """The DRA driver of :data:`CYBORG_NODE` on ``claims``, its devices Cyborg's now."""
    index = device_index(backend.discover())
    return Driver(
        CYBORG_NODE,
        claims,
        lambda: index,
        cdi_dir=tmp / "cdi",
        state_dir=tmp / "state",
        kinds=[backend.kind],
    )
