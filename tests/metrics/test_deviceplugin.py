"""Device-plugin mode with metrics on the testbed: GPUs handed to the device plugin by a
``--device-plugin-config`` file, /readyz waits for the real kubelet to accept every resource,
and an allocation for a pod moves ``kubeacc_deviceplugin_allocations_total``."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import Client
from lightkube.codecs import from_dict

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import free_port
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.dra.test_e2e import running
from tests.testbed.helpers import eventually

from .scrape import get, value

pytestmark = pytest.mark.cluster


def test_allocations_and_registrations(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    host = profiles.build("dgx-h100", tmp_path / "host")
    config = tmp_path / "dp.yaml"
    config.write_text("kind: DevicePluginConfig\ntypes:\n  gpu: {perModel: false}\n")
    port = free_port()
    agent = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    agent.start(
        extra=[
            f"--device-plugin-config={config}",
            f"--device-plugin-dir={testbed.kubelet.device_plugin_dir}",
            f"--metrics-address=127.0.0.1:{port}",
        ]
    )
    try:
        eventually(lambda: get(port, "/readyz") == (200, "ok\n"), 90, "agent ready")
        regs = value(port, "kubeacc_agent_kubelet_registrations_total", plugin="kubeacc.io/gpu")
        assert regs >= 1
        assert value(port, "kubeacc_agent_kubelet_registrations_total", plugin="dra") >= 1
        assert value(port, "kubeacc_deviceplugin_allocations_total") == 0
        kube_client.create(
            from_dict(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "dp", "namespace": namespace},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.example/app:1",
                                "resources": {"limits": {"kubeacc.io/gpu": "2"}},
                            }
                        ],
                    },
                }
            )
        )
        eventually(lambda: running(kube_client, "dp", namespace), 90, "pod Running")
        got = value(port, "kubeacc_deviceplugin_allocations_total", resource="kubeacc.io/gpu")
        assert got == 1  # one container
        assert value(port, "kubeacc_deviceplugin_allocation_errors_total") == 0
    finally:
        agent.stop()
