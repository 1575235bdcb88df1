"""The kubelet's plugin-facing directories and restarts with other settings."""

from __future__ import annotations

import dataclasses
import stat

import pytest

from kubeacc.testbed import Testbed

pytestmark = pytest.mark.cluster


def test_device_plugin_and_plugin_registry_dirs(testbed: Testbed) -> None:
    kubelet = testbed.kubelet
    # The device manager's registration socket shows up in the testbed's own directory
    # (bind-mounted over /var/lib/kubelet/device-plugins in the kubelet's mount namespace).
    assert kubelet.device_plugin_dir.is_relative_to(testbed.workdir)
    assert stat.S_ISSOCK(kubelet.kubelet_socket.stat().st_mode)
    assert kubelet.plugins_registry_dir.is_dir()
    assert stat.S_ISSOCK(kubelet.pod_resources_socket.stat().st_mode)


def test_kubelet_reports_the_configuration_it_was_given(testbed: Testbed) -> None:
    cfg = testbed.kubelet_configz()
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["containerRuntimeEndpoint"] == f"unix://{testbed.kubelet.cri_socket}"
    assert cfg["featureGates"]["DRAConsumableCapacity"] is True
    assert cfg["topologyManagerPolicy"] == testbed.kubelet.options.topology_manager_policy


def test_restart_with_topology_manager_policy(testbed: Testbed) -> None:
    kubelet = testbed.kubelet
    original = kubelet.options
    before = kubelet.kubelet_socket.stat().st_mtime_ns
    try:
        testbed.restart_kubelet(
            dataclasses.replace(
                original,
                topology_manager_policy="single-numa-node",
                topology_manager_scope="pod",
                cpu_manager_policy="static",
            )
        )
        # A new registration socket: device plugins must notice and register again.
        assert kubelet.kubelet_socket.stat().st_mtime_ns != before
        cfg = testbed.kubelet_configz()
        assert cfg["topologyManagerPolicy"] == "single-numa-node"
        assert cfg["topologyManagerScope"] == "pod"
        assert cfg["cpuManagerPolicy"] == "static"
    finally:
        testbed.restart_kubelet(original)
    assert testbed.kubelet_configz()["topologyManagerPolicy"] == original.topology_manager_policy
