"""The journeys run on the multi-node testbed, on its GPU server (gpu-server, a dgx-h100 host)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from lightkube import ApiError, Client

from kubeacc.agent.cleanup import clean
from kubeacc.crds.resources import Accelerator, install_crds
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import deleting_new_kubeacc_objects

#: The node the journeys install kube-acc on; the other three run kubelets and nothing of ours.
GPU_NODE = "gpu-server"


@pytest.fixture
def cluster(multinode_testbed: Testbed) -> Iterator[Testbed]:
    """The multi-node testbed with the CRDs and none of what earlier modules' agents left (their
    ResourceSlices, Node labels and Accelerators): only this test's agents publish devices."""
    client = multinode_testbed.client(field_manager="kubeacc-test")
    install_crds(client)
    clean(client, settle=1)
    for acc in client.list(Accelerator):
        if acc.metadata and acc.metadata.name:
            with contextlib.suppress(ApiError):
                client.delete(Accelerator, acc.metadata.name)
    with deleting_new_kubeacc_objects(client):
        yield multinode_testbed


@pytest.fixture
def kube_client(cluster: Testbed) -> Client:
    """An admin client of the multi-node cluster."""
    return cluster.client(field_manager="kubeacc-test")
