"""Every manifest in examples/ is complete and does what its header (and the docs) promise:
applied with kubectl to the multi-node testbed running kube-acc (as ``kubeacc demo`` does), the
policies generate their DeviceClasses, the operations succeed with their effect on the
Accelerators, and every claim's pod runs on the promised node and devices. The discovery and
device-plugin configs are run through ``kubeacc discover`` and ``kubeacc device-plugin`` (the
latter against the real kubelet)."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.synthetic import profiles
from kubeacc.synthetic.bitstreams import BITSTREAMS
from kubeacc.testbed import KubeletOptions, Testbed
from tests.agent.deviceplugin.test_kubelet import Plugin
from tests.testbed.helpers import eventually

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMESPACE = "ml-team"
DIGESTS = {b.name: b.sha256 for b in BITSTREAMS}
AFUS = {b.name: b.afu_id for b in BITSTREAMS}


def _manifests() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*.yaml") if "hosts" not in p.parts)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _rel(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


CLUSTER_FILES = [
    "namespace.yaml",
    "policies/fpga-bitstreams.yaml",
    "policies/h100-exclusive.yaml",
    "policies/l4-time-sliced.yaml",
    "operations/program-fpga.yaml",
    "operations/reset-gpu.yaml",
    "operations/drain-xpu.yaml",
    "claims/any-gpu.yaml",
    "claims/h100-by-model.yaml",
    "claims/gpus-nic-same-pcie-root.yaml",
    "claims/h200-else-xpu.yaml",
    "claims/fpga-with-bitstream.yaml",
    "claims/sriov-vf.yaml",
    "claims/xpu-claim-template.yaml",
]
CLUSTER_SCOPED = ("Namespace", "AcceleratorPolicy", "DiscoveryConfig", "DevicePluginConfig")
CONFIG_FILES = ["discovery/discovery-config.yaml", "device-plugin/device-plugin-config.yaml"]


def test_every_example_is_covered_here() -> None:
    assert sorted(_rel(p) for p in _manifests()) == sorted(CLUSTER_FILES + CONFIG_FILES)


@pytest.mark.parametrize("path", _manifests(), ids=_rel)
def test_manifest_is_complete(path: Path) -> None:
    docs = _docs(path)
    assert docs, path
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), (path, doc)
        meta = doc.get("metadata") or {}
        if doc["kind"] not in CLUSTER_SCOPED:
            assert meta.get("namespace") == NAMESPACE, (path, doc["kind"])
    text = path.read_text()
    # every digest names a file of the synthetic bitstream library, with that file's digest
    named = re.findall(
        r"(?:name|bitstream): (\S+\.gbs)\s+(?:sha256|digest): (?:sha256:)?([0-9a-f]{64})", text
    )
    assert len(named) == text.count(".gbs"), "a bitstream without its digest"
    for name, digest in named:
        assert DIGESTS[name] == digest, (path, name)


def _kubectl(tb: Testbed, *args: str) -> str:
    out = subprocess.run([*tb.kubectl(), *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _apply(tb: Testbed, rel: str) -> None:
    _kubectl(tb, "apply", "-f", str(EXAMPLES / rel))


def _acc(client: Client, name: str) -> dict[str, Any]:
    return as_dict(client.get(Accelerator, name))


def _op_done(client: Client, name: str) -> dict[str, Any] | None:
    op = as_dict(client.get(AcceleratorOperation, name, namespace=NAMESPACE))
    phase = (op.get("status") or {}).get("phase")
    return op if phase in ("Succeeded", "Failed") else None


def _results(client: Client, claim: str) -> list[Any]:
    c = client.get(ResourceClaim, claim, namespace=NAMESPACE)
    alloc = c.status.allocation if c.status else None
    return list(alloc.devices.results) if alloc else []


@pytest.fixture
def examples_cluster(
    kubeacc_multinode: KubeaccStack, multinode_testbed: Testbed
) -> Iterator[tuple[Testbed, Client]]:
    tb = multinode_testbed
    client = tb.client()
    yield tb, client
    for name in ("fpga-bitstreams", "h100-exclusive", "l4-time-sliced"):
        with contextlib.suppress(AssertionError):
            _kubectl(tb, "delete", "acceleratorpolicy", name, "--ignore-not-found")


def test_examples_apply_and_do_what_they_promise(
    examples_cluster: tuple[Testbed, Client],
) -> None:
    tb, client = examples_cluster
    _apply(tb, "namespace.yaml")
    tb.wait_service_account(NAMESPACE)

    for rel in CLUSTER_FILES[1:4]:
        _apply(tb, rel)
    classes = {
        "fpga-bitstreams.policy.kubeacc.io": 2,
        "h100.policy.kubeacc.io": 8,
        "l4-time-sliced.policy.kubeacc.io": 1,
    }
    for name in classes:
        eventually(lambda n=name: _exists(client, n), 60, f"DeviceClass {name}")
    shared = as_dict(client.get(DeviceClass, "l4-time-sliced.policy.kubeacc.io"))
    params = shared["spec"]["config"][0]["opaque"]["parameters"]
    assert (params["mode"], params["maxConsumers"]) == ("TimeSliced", 4)

    for rel in CLUSTER_FILES[4:7]:
        _apply(tb, rel)
    for op in ("program-gzip", "reset-gpu", "drain-xpu"):
        done = eventually(lambda o=op: _op_done(client, o), 90, f"operation {op}")
        assert done["status"]["phase"] == "Succeeded", done["status"]
    fpga = _acc(client, "fpga-node-fpga-0000-3b-00-0")
    assert fpga["status"]["device"]["fpga"]["afuId"] == AFUS["n3000/gzip-v1.gbs"]
    assert _acc(client, "kunlun-node-xpu-0000-b6-00-0")["spec"]["cordoned"] is True

    for rel in CLUSTER_FILES[7:]:
        _apply(tb, rel)
    pods = ["any-gpu", "h100", "gpus-nic-same-root", "h200-else-xpu", "fpga-crypto", "sriov-vf"]
    pods.append("xpu-from-template")

    def all_running() -> bool:
        phases = {
            p.metadata.name: p.status.phase
            for p in client.list(Pod, namespace=NAMESPACE)
            if p.metadata and p.status
        }
        return all(phases.get(p) == "Running" for p in pods)

    eventually(all_running, 150, "every example pod Running")
    node_of = {
        p.metadata.name: p.spec.nodeName
        for p in client.list(Pod, namespace=NAMESPACE)
        if p.metadata and p.spec
    }
    assert node_of["any-gpu"] in ("gpu-server", "edge-node")
    assert node_of["h100"] == "gpu-server"
    (h100,) = _results(client, "h100")
    assert h100.device.startswith("gpu-")
    assert _acc(client, f"gpu-server-{h100.device}")["status"]["device"]["model"].startswith(
        "NVIDIA H100"
    )
    same_root = _results(client, "gpus-nic-same-root")
    roots = {
        _acc(client, f"gpu-server-{r.device}")["status"]["device"]["pcieRoot"] for r in same_root
    }
    assert len(same_root) == 3 and len(roots) == 1
    (xpu,) = _results(client, "h200-else-xpu")
    assert (node_of["h200-else-xpu"], xpu.request) == ("kunlun-node", "acc/xpu")
    assert node_of["fpga-crypto"] == "fpga-node"
    programmed = eventually(
        lambda: (
            _acc(client, "fpga-node-fpga-0000-af-00-0")["status"]["device"]["fpga"].get("afuId")
            == AFUS["crypto-offload-v3.gbs"]
        ),
        60,
        "crypto-offload-v3 AFU on the Arria 10",
    )
    assert programmed
    (vf,) = _results(client, "sriov-vf")
    assert "-vf" in vf.device
    records = tb.node(node_of["sriov-vf"]).container_records(namespace=NAMESPACE, pod="sriov-vf")
    assert records and records[-1].cdi_devices
    assert node_of["xpu-from-template"] == "kunlun-node"


def _exists(client: Client, name: str) -> bool:
    try:
        client.get(DeviceClass, name)
    except ApiError:
        return False
    return True


def test_discovery_config_example(tmp_path: Path) -> None:
    host = profiles.build("edge-mixed", tmp_path / "edge")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeacc.cli",
            "discover",
            "--host-root",
            str(host),
            "--config",
            str(EXAMPLES / "discovery/discovery-config.yaml"),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    devices = {d["pciBusID"]: d for d in json.loads(out.stdout)["devices"]}
    npu = devices["0000:04:00.0"]
    assert (npu["type"], npu["model"], npu["source"]) == ("xpu", "Edge NPU E1", "admin")


def test_device_plugin_config_example(testbed: Testbed, namespace: str, tmp_path: Path) -> None:
    client = testbed.client()
    host = profiles.build("edge-mixed", tmp_path / "edge")
    plugin = Plugin(
        host,
        testbed.kubelet.device_plugin_dir,
        tmp_path / "plugin.log",
        ["--config", str(EXAMPLES / "device-plugin/device-plugin-config.yaml")],
    )
    try:
        want = {"kubeacc.io/gpu-l4": "1", "kubeacc.io/nic": "1", "kubeacc.io/fpga": "4"}

        def advertised() -> bool:
            status = client.get(Node, testbed.node_name).status
            alloc = (status.allocatable if status else None) or {}
            return all(alloc.get(k) == v for k, v in want.items())

        eventually(advertised, 60, f"{want} allocatable")
        status = client.get(Node, testbed.node_name).status
        # GPUs are served per model only; a generic kubeacc.io/gpu left by an earlier plugin on
        # this kubelet is kept with no allocatable devices, so 0 or absent both mean "not served".
        assert status and (status.allocatable or {}).get("kubeacc.io/gpu", "0") == "0"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "l4", "namespace": namespace},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.example/app:1",
                        "resources": {"limits": {"kubeacc.io/gpu-l4": "1"}},
                    }
                ],
            },
        }
        from lightkube.codecs import from_dict

        client.create(from_dict(pod))
        (record,) = eventually(
            lambda: testbed.kubelet.container_records(namespace=namespace, pod="l4"),
            60,
            "the pod's container",
        )
        assert record.envs["ACCELERATOR_UNITS"] == "0000:01:00.0"
    finally:
        plugin.stop()
        # the kubelet keeps advertising a gone plugin's resources until it restarts
        testbed.restart_kubelet(KubeletOptions(node_name=testbed.node_name))
