"""One agent, both kubelet interfaces: device-plugin types are never published to DRA."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def _slice_types(client: Client, node: str) -> dict[str, int]:
    types: dict[str, int] = {}
    for s in client.list(ResourceSlice):
        if s.spec.driver != DRIVER_NAME or s.spec.nodeName != node:
            continue
        for dev in s.spec.devices or []:
            attrs = dev.attributes or {}
            attr = attrs.get(f"{DRIVER_NAME}/type") or attrs.get("type") or {}
            kind = attr.get("string", "?") if isinstance(attr, dict) else attr.string
            types[kind] = types.get(kind, 0) + 1
    return types


def test_gpus_by_device_plugin_nics_by_dra(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    host = profiles.build("dgx-h100", tmp_path / "host")
    agent = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    agent.start(
        extra=[
            "--device-plugin-type=gpu",
            f"--device-plugin-dir={testbed.kubelet.device_plugin_dir}",
        ]
    )
    try:
        agent.wait_registered()

        def gpus_allocatable() -> bool:
            status = kube_client.get(Node, testbed.node_name).status
            return bool(status and (status.allocatable or {}).get("kubeacc.io/gpu") == "8")

        eventually(gpus_allocatable, 60, "kubeacc.io/gpu from the agent's device plugin")
        types = eventually(
            lambda: _slice_types(kube_client, testbed.node_name) or None, 60, "slices"
        )
        assert "gpu" not in types, f"GPUs are served by the device plugin only: {types}"
        assert types.get("nic", 0) >= 8, types
    finally:
        agent.stop()
