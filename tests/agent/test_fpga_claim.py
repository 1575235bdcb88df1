"""FPGA by claim: a DRA claim's FpgaConfig names a bitstream and preparing it programs the card.

The real scheduler allocates an FPGA from the agent's slices, the real kubelet calls
NodePrepareResources, the agent loads the bitstream (through the synthetic kernel at the ioctl
boundary) before the container starts, and the new AFU id shows in the ResourceSlice. A
bitstream that no AcceleratorPolicy allows fails the claim with a clear error and leaves the
card as it was. This is the agent without binding conditions (``--no-fpga-binding-conditions``,
and clusters that drop them); with them the bitstream is loaded before the pod is bound
(tests/agent/dra/test_binding_cluster.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.model import DeviceType
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.dra.test_e2e import pod_obj, running
from tests.hosts import discover
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

NEW_AFU = "d8424dc4a4a3c413f89e433683f9040b"


def _claim(name: str, ns: str, device: str, bitstream: str, digest: str) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "fpga",
                            "exactly": {
                                "deviceClassName": "fpga.kubeacc.io",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": f'device.attributes["{DRIVER_NAME}"]'
                                            f".index == {device}"
                                        }
                                    }
                                ],
                            },
                        }
                    ],
                    "config": [fpga_claim_config(bitstream, digest)],
                }
            },
        }
    )


@pytest.fixture
def fpga_node(
    testbed: Testbed,
    kube_client: Client,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    tmp_path: Path,
) -> Iterator[tuple[AgentProcess, Path, dict[str, str]]]:
    host = profiles.build("intel-fpga-dfl", tmp_path / "host")
    empty = next(d for d in discover(host).by_type(DeviceType.FPGA) if d.fpga and not d.fpga.afu_id)
    assert empty.fpga and empty.fpga.interface_id
    library = tmp_path / "bitstreams"
    library.mkdir()
    digests = {}
    for name, payload in (("allowed.gbs", b"ok" * 512), ("forbidden.gbs", b"no" * 512)):
        data = make_gbs(NEW_AFU, empty.fpga.interface_id, payload, name=name)
        (library / name).write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    kube_client.create(
        from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorPolicy",
                "metadata": {"name": "fpga-claims"},
                "spec": {
                    "selector": {"types": ["fpga"]},
                    "allowedBitstreams": [
                        {"name": "allowed.gbs", "sha256": digests["allowed.gbs"]}
                    ],
                },
            }
        )
    )
    agent = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    # programming at prepare (the path where the cluster keeps no binding conditions);
    # tests/agent/dra/test_binding_cluster.py loads it before binding
    agent.start(
        extra=[f"--bitstream-dir={library}", "--simulate-kernel", "--no-fpga-binding-conditions"]
    )
    try:
        agent.wait_registered()
        yield agent, host, {"index": str(empty.index), "name": empty.name, **digests}
    finally:
        agent.stop()


def _afu_in_slice(client: Client, node: str, device: str) -> str | None:
    for s in client.list(ResourceSlice):
        if s.spec.driver != DRIVER_NAME or s.spec.nodeName != node:
            continue
        for dev in s.spec.devices or []:
            if dev.name == device:
                attr = (dev.attributes or {}).get("afuId")
                if attr is None:
                    return None
                return attr["string"] if isinstance(attr, dict) else attr.string
    return None


def test_claim_programs_the_fpga_before_the_pod_starts(
    testbed: Testbed, kube_client: Client, namespace: str, fpga_node: Any
) -> None:
    agent, host, facts = fpga_node
    digest = "sha256:" + facts["allowed.gbs"]
    kube_client.create(_claim("fpga", namespace, facts["index"], "allowed.gbs", digest))
    kube_client.create(pod_obj("app", namespace, "fpga"))
    eventually(lambda: running(kube_client, "app", namespace), 90, "pod Running")
    claim = kube_client.get(ResourceClaim, "fpga", namespace=namespace)
    (result,) = claim.status.allocation.devices.results  # type: ignore[union-attr]
    assert result.device == facts["name"]
    dev = next(d for d in discover(host).devices if d.name == facts["name"])
    assert dev.fpga and dev.fpga.afu_id == NEW_AFU, "the card now carries the claim's AFU"
    eventually(
        lambda: _afu_in_slice(kube_client, testbed.node_name, facts["name"]) == NEW_AFU,
        30,
        "the new AFU id in the ResourceSlice",
    )
    assert "programmed" in agent.log()


def test_bitstream_not_allowed_fails_the_claim(
    testbed: Testbed, kube_client: Client, namespace: str, fpga_node: Any
) -> None:
    _agent, host, facts = fpga_node
    digest = "sha256:" + facts["forbidden.gbs"]
    kube_client.create(_claim("fpga", namespace, facts["index"], "forbidden.gbs", digest))
    kube_client.create(pod_obj("app", namespace, "fpga"))

    def refused() -> str | None:
        for ev in kube_client.list(Event, namespace=namespace):
            if "BitstreamNotAllowed" in (ev.message or ""):
                return ev.message
        return None

    message = eventually(refused, 90, "the kubelet's event with the per-claim error")
    assert "forbidden.gbs" in message
    assert not running(kube_client, "app", namespace)
    dev = next(d for d in discover(host).devices if d.name == facts["name"])
    assert dev.fpga and dev.fpga.afu_id is None, "nothing was loaded"
    assert kube_client.get(Pod, "app", namespace=namespace).status.phase == "Pending"  # type: ignore[union-attr]
