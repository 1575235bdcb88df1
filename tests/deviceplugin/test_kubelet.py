"""Device plugin mode against the testbed's real kubelet.

One plugin process (``kubeacc device-plugin``) serves the 8-GPU synthetic server for the whole
module; the tests run in order: registration and capacity, a kubelet restart with the
single-numa-node Topology Manager policy, a 2-GPU pod, then a device turning unhealthy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.generic_resource import get_generic_resource  # noqa: F401 - keeps lightkube warm
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.model import DeviceType
from kubeacc.synthetic import profiles
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from tests.hosts import discover
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

GPU = "kubeacc.io/gpu"
H100 = "kubeacc.io/gpu-h100-80gb-hbm3"
NIC = "kubeacc.io/nic"


class Plugin:
    def __init__(self, host: Path, plugin_dir: Path, log: Path, args: list[str] | None = None):
        self.host = host
        self.log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubeacc.cli",
                "device-plugin",
                "--host-root",
                str(host),
                "--plugin-dir",
                str(plugin_dir),
                "--interval",
                "0.5",
                *(args if args is not None else ["--type", "gpu", "--type", "nic"]),
            ],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def plugin(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    work = tmp_path_factory.mktemp("dp")
    host = profiles.build("dgx-h100", work / "host")
    p = Plugin(host, testbed.kubelet.device_plugin_dir, work / "plugin.log")
    yield p
    p.stop()
    testbed.restart_kubelet(KubeletOptions(node_name=testbed.node_name))


def _allocatable(client: Client, node: str) -> dict[str, str]:
    status = client.get(Node, node).status
    return dict(status.allocatable or {}) if status else {}


def test_resources_show_in_node_capacity(
    plugin: Plugin, testbed: Testbed, kube_client: Client
) -> None:
    def advertised() -> dict[str, str] | None:
        alloc = _allocatable(kube_client, testbed.node_name)
        return alloc if alloc.get(GPU) == "8" and alloc.get(NIC) == "8" else None

    alloc = eventually(advertised, 60, "kubeacc resources in allocatable")
    # One resource per device: the default serves no per-model resource beside kubeacc.io/gpu.
    assert alloc.get(H100, "0") == "0", alloc
    capacity = kube_client.get(Node, testbed.node_name).status.capacity  # type: ignore[union-attr]
    assert capacity and capacity[GPU] == "8"


def test_kubelet_restart_leads_to_reregistration(
    plugin: Plugin, testbed: Testbed, kube_client: Client
) -> None:
    before = plugin.output().count("registered kubeacc.io/gpu ")
    testbed.restart_kubelet(
        KubeletOptions(node_name=testbed.node_name, topology_manager_policy="single-numa-node")
    )
    assert testbed.kubelet_configz()["topologyManagerPolicy"] == "single-numa-node"
    eventually(
        lambda: plugin.output().count("registered kubeacc.io/gpu ") > before,
        10,
        "the plugin registering again",
    )
    assert "kubelet socket recreated" in plugin.output()
    eventually(lambda: _allocatable(kube_client, testbed.node_name).get(GPU) == "8", 60, "GPUs")


def test_two_gpus_on_one_numa_node(
    plugin: Plugin, testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    pod = from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "two-gpus", "namespace": namespace},
            "spec": {
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {GPU: "2"}},
                    }
                ]
            },
        }
    )
    kube_client.create(pod)
    eventually(
        lambda: (
            (p := kube_client.get(Pod, "two-gpus", namespace=namespace)).status
            and p.status.phase == "Running"
        ),
        90,
        "pod Running",
    )
    records = testbed.kubelet.container_records(namespace=namespace, pod="two-gpus")
    assert len(records) == 1
    units = records[0].envs["ACCELERATOR_UNITS"].split(",")
    assert len(units) == 2
    inv = discover(plugin.host)
    numa = {d.pci_bus_id: d.numa_node for d in inv.by_type(DeviceType.GPU)}
    assert len({numa[u] for u in units}) == 1, f"{units} span NUMA nodes"
    assert records[0].envs["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 2
    nodes = {d.host_path for d in records[0].devices}
    assert "/dev/nvidiactl" in nodes
    assert len([n for n in nodes if n[11:].isdigit()]) == 2


def test_unhealthy_device_lowers_allocatable(
    plugin: Plugin, testbed: Testbed, kube_client: Client
) -> None:
    nvml = plugin.host / ".synthetic/nvml.json"
    data = json.loads(nvml.read_text())
    data["gpus"][0]["remappedRows"] = {"failure": True}
    nvml.write_text(json.dumps(data))
    eventually(
        lambda: _allocatable(kube_client, testbed.node_name).get(GPU) == "7",
        30,
        "allocatable GPUs down to 7",
    )
    del data["gpus"][0]["remappedRows"]
    nvml.write_text(json.dumps(data))
    eventually(lambda: _allocatable(kube_client, testbed.node_name).get(GPU) == "8", 30, "8 again")


def test_cdi_names_resolve_to_the_written_spec(
    plugin: Plugin, testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    host = profiles.build("kunlun-xpu", tmp_path / "host")
    config = tmp_path / "dp.yaml"
    config.write_text("types:\n  xpu: {perModel: false}\ncdi: true\n")
    cdi_dir = tmp_path / "cdi"
    xpu = Plugin(
        host,
        testbed.kubelet.device_plugin_dir,
        tmp_path / "xpu.log",
        ["--config", str(config), "--cdi-dir", str(cdi_dir)],
    )
    try:
        eventually(
            lambda: _allocatable(kube_client, testbed.node_name).get("kubeacc.io/xpu") == "8",
            60,
            "kubeacc.io/xpu",
        )
        pod = from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "one-xpu", "namespace": namespace},
                "spec": {
                    "containers": [
                        {
                            "name": "infer",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"kubeacc.io/xpu": "1"}},
                        }
                    ]
                },
            }
        )
        kube_client.create(pod)
        eventually(
            lambda: (
                (p := kube_client.get(Pod, "one-xpu", namespace=namespace)).status
                and p.status.phase == "Running"
            ),
            90,
            "pod Running",
        )
        (record,) = testbed.kubelet.container_records(namespace=namespace, pod="one-xpu")
        (name,) = record.cdi_devices
        kind, _, device = name.partition("=")
        assert kind == "kubeacc.io/device"
        spec = json.loads((cdi_dir / "kubeacc.io-device.json").read_text())
        assert spec["kind"] == kind
        entry = next(d for d in spec["devices"] if d["name"] == device)
        nodes = [n["path"] for n in entry["containerEdits"]["deviceNodes"]]
        assert any(n.startswith("/dev/xpu") and n[8:].isdigit() for n in nodes)
        assert record.envs["ACCELERATOR_UNITS"] in entry["containerEdits"]["env"][0]
    finally:
        xpu.stop()
