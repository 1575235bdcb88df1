"""``kubeacc cleanup`` on the real API server: the agents' slices and Node labels go, no more."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.node.nodelabels import NodeLabeler
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import resource_slice

pytestmark = pytest.mark.cluster


@pytest.fixture
def node(kube_client: Client) -> Iterator[str]:
    name = f"clean-{uuid.uuid4().hex[:6]}"
    kube_client.create(Node(metadata=ObjectMeta(name=name, labels={"kubeacc.io/pool": "admin"})))
    yield name
    with contextlib.suppress(ApiError):
        kube_client.delete(Node, name)


def test_cleanup_removes_slices_and_labels_of_the_agents(
    testbed: Testbed, kube_client: Client, node: str
) -> None:
    kube_client.create(resource_slice(f"{node}-kubeacc.io-0", node, "kubeacc.io"))
    kube_client.create(resource_slice(f"{node}-other", node, "other.example.com"))
    NodeLabeler(kube_client, node).apply(
        {"kubeacc.io/gpu.count": "2", "kubeacc.io/gpu.driver": "true"}
    )
    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "kubeacc"),
                "cleanup",
                f"--kubeconfig={testbed.kubeconfig}",
                "--settle=0.5",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        # cluster-wide: earlier tests' agents may have left labels on node-a too
        found = re.fullmatch(
            r"removed (\d+) ResourceSlices, kubeacc.io labels of (\d+) Nodes\n", done.stdout
        )
        assert found and int(found[1]) >= 1 and int(found[2]) >= 1, done.stdout
        drivers = {
            s.spec.driver for s in kube_client.list(ResourceSlice, fields={"spec.nodeName": node})
        }
        assert drivers == {"other.example.com"}
        labels = kube_client.get(Node, node).metadata.labels
        assert {k: v for k, v in labels.items() if k.startswith("kubeacc.io/")} == {
            "kubeacc.io/pool": "admin"
        }
    finally:
        with contextlib.suppress(ApiError):
            kube_client.delete(ResourceSlice, f"{node}-other")
