"""Least privilege: a node agent (user system:kubeacc:agent:<node>) can write only its own
node's Accelerators and operation results; the ValidatingAdmissionPolicy refuses the rest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.types import PatchType

from kubeacc.crds.api import API_VERSION
from kubeacc.crds.deploy import apply_manifest
from kubeacc.crds.resources import Accelerator, AcceleratorOperation
from kubeacc.model import Device, DeviceType
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.identities import agent_cert_client
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import create_operation, put_accelerator, resource_slice
from tests.hosts import discover
from tests.testbed.helpers import eventually_refused


@pytest.fixture(scope="module")
def device(tmp_path_factory: pytest.TempPathFactory) -> Device:
    root = build("intel-fpga-dfl", tmp_path_factory.mktemp("host") / "root")
    return discover(Path(root)).by_type(DeviceType.FPGA)[0]


def _status_patch(name: str, node: str, device: Device) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {"name": name},
        "status": {
            "hostDriver": "dfl-pci",
            "device": device.to_json_dict(),
        },
    }


def _denied(fn: Callable[[], Any]) -> str:
    with pytest.raises(ApiError) as err:
        fn()
    assert err.value.status.code in (403, 422), err.value.status
    return str(err.value.status.message)


def test_agent_cannot_modify_another_nodes_objects(
    testbed: Testbed,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    kube_client: Client,
    namespace: str,
    device: Device,
    tmp_path: Path,
) -> None:
    apply_manifest(kube_client, "rbac/agent.yaml")
    apply_manifest(kube_client, "admission/agent-node-restriction.yaml")
    mine = put_accelerator(kube_client, "node-a", device)
    theirs = put_accelerator(kube_client, "node-b", device)
    agent = agent_cert_client(testbed, "node-a", tmp_path)

    msg = eventually_refused(
        lambda: agent.patch(
            Accelerator.Status,
            theirs,
            _status_patch(theirs, "node-b", device),
            patch_type=PatchType.APPLY,
            force=True,
        )
    )
    assert "node agent node-a may only write Accelerators of node node-a" in msg
    # its own node's object: allowed
    agent.patch(
        Accelerator.Status,
        mine,
        _status_patch(mine, "node-a", device),
        patch_type=PatchType.APPLY,
        force=True,
    )

    other = device.replace(name="fpga-0000-99-00-0")
    new_name = f"node-b-{other.name}"
    msg = _denied(
        lambda: agent.patch(
            Accelerator,
            new_name,
            {
                "apiVersion": API_VERSION,
                "kind": "Accelerator",
                "metadata": {"name": new_name},
                "spec": {"node": "node-b", "deviceName": other.name},
            },
            patch_type=PatchType.APPLY,
            force=True,
        )
    )
    assert "may only write Accelerators of node node-a" in msg
    msg = _denied(lambda: agent.delete(Accelerator, theirs))
    assert "may only write Accelerators of node node-a" in msg
    msg = _denied(
        lambda: agent.patch(
            Accelerator, mine, {"spec": {"cordoned": True}}, patch_type=PatchType.MERGE
        )
    )
    assert "spec.cordoned is set by the controller" in msg

    # Operation results: only for its own node.
    create_operation(
        kube_client, namespace, "reset-both", {"action": "Reset", "targets": [mine, theirs]}
    )
    base = {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorOperation",
        "metadata": {"name": "reset-both", "namespace": namespace},
    }
    kube_client.patch(
        AcceleratorOperation.Status,
        "reset-both",
        {
            **base,
            "status": {
                "phase": "Running",
                "dispatch": [
                    {"accelerator": mine, "node": "node-a", "deviceName": device.name},
                    {"accelerator": theirs, "node": "node-b", "deviceName": device.name},
                ],
            },
        },
        namespace=namespace,
        patch_type=PatchType.APPLY,
        field_manager="kubeacc-controller",
    )

    def result(acc: str, node: str) -> dict[str, Any]:
        return {"accelerator": acc, "node": node, "phase": "Succeeded", "reason": "Reset"}

    msg = _denied(
        lambda: agent.patch(
            AcceleratorOperation.Status,
            "reset-both",
            {**base, "status": {"results": [result(theirs, "node-b")]}},
            namespace=namespace,
            patch_type=PatchType.APPLY,
            force=True,
        )
    )
    assert "may only report results of its own node" in msg
    msg = _denied(
        lambda: agent.patch(
            AcceleratorOperation.Status,
            "reset-both",
            {**base, "status": {"phase": "Succeeded", "results": [result(mine, "node-a")]}},
            namespace=namespace,
            patch_type=PatchType.APPLY,
            force=True,
        )
    )
    assert "status.phase belongs to the controller" in msg
    agent.patch(
        AcceleratorOperation.Status,
        "reset-both",
        {**base, "status": {"results": [result(mine, "node-a")]}},
        namespace=namespace,
        patch_type=PatchType.APPLY,
        force=True,
    )


def test_agent_writes_only_its_own_nodes_resource_slices(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    from lightkube.resources.resource_v1 import ResourceSlice

    apply_manifest(kube_client, "rbac/agent.yaml")
    apply_manifest(kube_client, "admission/agent-node-restriction.yaml")
    agent = agent_cert_client(testbed, "node-a", tmp_path)
    kube_client.create(resource_slice("node-b-kubeacc", "node-b"))
    msg = eventually_refused(lambda: agent.create(resource_slice("node-b-forged", "node-b")))
    assert "may only write kubeacc.io ResourceSlices of node node-a" in msg
    msg = _denied(lambda: agent.delete(ResourceSlice, "node-b-kubeacc"))
    assert "of node node-a" in msg
    msg = _denied(
        lambda: agent.create(resource_slice("node-a-kubeacc.io-1", "node-a", "other.example.com"))
    )
    assert "kubeacc.io ResourceSlices" in msg
    # Its own node's slice: allowed, also to delete.
    agent.create(resource_slice("node-a-kubeacc.io-0", "node-a"))
    agent.delete(ResourceSlice, "node-a-kubeacc.io-0")
