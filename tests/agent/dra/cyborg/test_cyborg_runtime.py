"""A Cyborg unit reaching a real container (containerd + runc, ``runtime_testbed``): the CDI
spec kube-acc wrote from Cyborg's attach handle is applied by containerd, so the workload sees
the PCI address Cyborg bound and its ARQ, which nothing in the pod spec names. The node
(``node-r``) is the cloud's compute host ``node-a`` in Cyborg (``--cyborg-compute-host``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.agent.dra.cyborg.kind import ENV_ARQ, ENV_PCI
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.cyborgcloud import CyborgCloud
from tests.agent.test_real_runtime import seen, wait_running, workload
from tests.conftest import CYBORG_NODE
from tests.testbed.helpers import eventually

from ..test_e2e import claim_obj, gone
from .conftest import leftover
from .test_cyborg_e2e import CyborgAgent, cyborg_flags, fpgas

pytestmark = [pytest.mark.cluster, pytest.mark.cyborg]


@pytest.fixture
def agent(
    runtime_testbed: Testbed, cyborg_cloud: CyborgCloud, tmp_path: Path
) -> Iterator[CyborgAgent]:
    kubelet = runtime_testbed.kubelet
    host = profiles.build("amd-gpu", tmp_path / "host")
    a = CyborgAgent(kubelet.node_name, host, runtime_testbed.kubeconfig, kubelet.root_dir, tmp_path)
    a.cdi_dir = kubelet.cdi_dir  # the directory containerd reads its CDI specs from
    a.cyborg_flags = [
        *cyborg_flags(cyborg_cloud, tmp_path),
        f"--device-root={kubelet.device_root}",
        # the cloud's one compute host: the node's name in Cyborg is not its Node's name
        f"--cyborg-compute-host={CYBORG_NODE}",
    ]
    try:
        yield a
    finally:
        a.stop()
        leftover(cyborg_cloud, delete=True)


def test_the_container_sees_the_unit_cyborg_bound(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    cyborg_cloud: CyborgCloud,
    agent: CyborgAgent,
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client: Client = tb.client(field_manager="kubeacc-test")
    agent.start_on_cyborg()
    client.create(claim_obj("fpga", ns, fpgas()))
    client.create(workload("app", ns, claim="fpga"))
    wait_running(client, "app", ns)
    meta = client.get(ResourceClaim, "fpga", namespace=ns).metadata
    assert meta is not None and meta.uid is not None
    arqs = cyborg_cloud.cyborg("GET", f"/v2/accelerator_requests?instance={meta.uid}")["arqs"]
    (arq,) = arqs
    assert arq["state"] == "Bound" and arq["hostname"] == CYBORG_NODE
    handle = arq["attach_handle_info"]
    pci = f"{handle['domain']}:{handle['bus']}:{int(handle['device']):02x}.{handle['function']}"
    env = seen(tb, ns, "app").env
    assert env[ENV_ARQ] == arq["uuid"]
    assert env[ENV_PCI] == pci

    client.delete(Pod, "app", namespace=ns, grace_period=0)
    eventually(lambda: gone(client, "app", ns), 120, "pod gone")
    client.delete(ResourceClaim, "fpga", namespace=ns)
    eventually(
        lambda: leftover(cyborg_cloud) == {"arqs": [], "allocations": {}},
        60,
        "ARQ and allocation deleted",
    )
