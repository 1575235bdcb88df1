"""Every manifest in examples/ is complete, names no node or Accelerator, runs a public image,
and does what its header (and the docs) promise: applied with kubectl to the multi-node testbed
running kube-acc (as ``kubeacc demo`` does, but with the chart's controller rule: only its
release namespace operates on any device, ml-team by the examples' grant) while the demo's own
policies and claims hold their devices, the policies generate their DeviceClasses, the
operations pick their targets by label and succeed with their effect on the Accelerators, and
every claim's pod runs on the promised node and devices (none stays Pending). The discovery and
device-plugin configs are run through ``kubeacc discover`` and ``kubeacc device-plugin`` (the
latter against the real kubelet).

The multi-node testbed's kubelets run the fake runtime: the examples' image (``busybox:1.36``)
is never pulled there, so no image needs substituting; what a container gets is read from the
runtime's records."""

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

from kubeacc.cli.demo import NAMESPACE as DEMO_NAMESPACE
from kubeacc.cli.demo_claims import CLAIMS as DEMO_CLAIMS
from kubeacc.cli.demo_claims import POLICIES as DEMO_POLICIES
from kubeacc.cli.demo_claims import claim as demo_claim
from kubeacc.cli.demo_claims import pod as demo_pod
from kubeacc.cli.demo_claims import policy as demo_policy
from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.synthetic import profiles
from kubeacc.synthetic.bitstreams import BITSTREAMS
from kubeacc.testbed import KubeletOptions, Testbed
from kubeacc.testbed.shapes import MULTINODE_SHAPES
from tests.deviceplugin.test_kubelet import Plugin
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
    "policies/ml-team-operations.yaml",
    "operations/program-fpga.yaml",
    "operations/reset-gpu.yaml",
    "operations/drain-xpu.yaml",
    "claims/any-gpu.yaml",
    "claims/h100-by-model.yaml",
    "claims/gpu-nic-same-pcie-root.yaml",
    "claims/h200-else-xpu.yaml",
    "claims/fpga-with-bitstream.yaml",
    "claims/sriov-vf.yaml",
    "claims/xpu-claim-template.yaml",
]
POLICY_FILES = [f for f in CLUSTER_FILES if f.startswith("policies/")]
OPERATION_FILES = [f for f in CLUSTER_FILES if f.startswith("operations/")]
CLAIM_FILES = [f for f in CLUSTER_FILES if f.startswith("claims/")]
#: The controller's admin namespace, as the chart installs it (its release namespace): an
#: operation from any other namespace needs a policy's grant (allowedNamespaces).
ADMIN_NAMESPACE = "kubeacc-system"
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
    # portable: no placeholder image, no node or Accelerator names
    assert "registry.example" not in text
    assert not re.search(r"gpu-server|fpga-node|kunlun-node|edge-node", _body(text)), path
    for doc in docs:
        if doc["kind"] == "AcceleratorOperation":
            assert "targets" not in doc["spec"] and doc["spec"]["targetSelector"], path
        for c in _containers(doc):
            assert c["image"] == "busybox:1.36", (path, c)
    # every digest names a file of the synthetic bitstream library, with that file's digest
    named = re.findall(
        r"(?:name|bitstream): (\S+\.gbs)\s+(?:sha256|digest): (?:sha256:)?([0-9a-f]{64})", text
    )
    assert len(named) == text.count(".gbs"), "a bitstream without its digest"
    for name, digest in named:
        assert DIGESTS[name] == digest, (path, name)


def _body(text: str) -> str:
    """The manifest without its header comments (which say where things land on the demo)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "Pod":
        return list(spec.get("containers") or [])
    return []


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


def _demo_claims_hold_their_devices(client: Client, tb: Testbed) -> None:
    """What ``kubeacc demo`` leaves running: its policies, and its claims with a pod each."""
    from lightkube.codecs import from_dict

    for name in DEMO_POLICIES:
        client.create(from_dict(demo_policy(name)))
    _kubectl(tb, "create", "namespace", DEMO_NAMESPACE)
    tb.wait_service_account(DEMO_NAMESPACE)
    for name in DEMO_CLAIMS:
        client.create(from_dict(demo_claim(name, DEMO_NAMESPACE)))
        client.create(from_dict(demo_pod(name, DEMO_NAMESPACE)))
    eventually(
        lambda: _all_running(client, DEMO_NAMESPACE, [f"{n}-pod" for n in DEMO_CLAIMS]),
        150,
        "every demo pod Running",
    )


def _all_running(client: Client, namespace: str, pods: list[str]) -> bool:
    phases = {
        p.metadata.name: p.status.phase
        for p in client.list(Pod, namespace=namespace)
        if p.metadata and p.status
    }
    return all(phases.get(p) == "Running" for p in pods)


@pytest.fixture(scope="module")
def kubeacc_as_installed(
    multinode_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeaccStack]:
    """kube-acc on the multi-node testbed (as ``kubeacc demo`` runs it), except that the
    controller lets only ADMIN_NAMESPACE operate on any device, as the chart's does: the demo's
    controller allows every namespace, which would hide an example that lacks a grant."""
    stack = KubeaccStack(
        multinode_testbed,
        tmp_path_factory.mktemp("examples"),
        {s.name: s.profile for s in MULTINODE_SHAPES},
        interval=0.5,
        admin_namespaces=(ADMIN_NAMESPACE,),
    )
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def examples_cluster(
    kubeacc_as_installed: KubeaccStack, multinode_testbed: Testbed
) -> Iterator[tuple[Testbed, Client]]:
    tb = multinode_testbed
    client = tb.client()
    yield tb, client
    for name in (
        "fpga-bitstreams",
        "h100-exclusive",
        "l4-time-sliced",
        "ml-team-operations",
        *DEMO_POLICIES,
    ):
        with contextlib.suppress(AssertionError):
            _kubectl(tb, "delete", "acceleratorpolicy", name, "--ignore-not-found")
    with contextlib.suppress(AssertionError):
        _kubectl(tb, "delete", "namespace", DEMO_NAMESPACE, "--ignore-not-found", "--wait=false")


def _target(client: Client, op: dict[str, Any], kind: str) -> dict[str, Any]:
    """The one Accelerator the operation chose, checked to be of type ``kind``."""
    (name,) = op["status"]["targets"]
    dispatched = [d["accelerator"] for d in op["status"].get("dispatch") or []]
    assert dispatched in ([name], [])  # a Drain is the controller's alone: no dispatch
    acc = _acc(client, name)
    assert acc["status"]["device"]["type"] == kind, acc
    return acc


def test_examples_apply_and_do_what_they_promise(
    examples_cluster: tuple[Testbed, Client],
) -> None:
    tb, client = examples_cluster
    _demo_claims_hold_their_devices(client, tb)
    _apply(tb, "namespace.yaml")
    tb.wait_service_account(NAMESPACE)

    for rel in POLICY_FILES:
        _apply(tb, rel)
    classes = {
        "fpga-bitstreams.policy.kubeacc.io": 2,
        "exclusive-h100": 8,
        "l4-time-sliced.policy.kubeacc.io": 1,
        "ml-team-operations.policy.kubeacc.io": 3,
    }
    for name in classes:
        eventually(lambda n=name: _exists(client, n), 60, f"DeviceClass {name}")
    shared = as_dict(client.get(DeviceClass, "l4-time-sliced.policy.kubeacc.io"))
    params = shared["spec"]["config"][0]["opaque"]["parameters"]
    assert (params["mode"], params["maxConsumers"]) == ("TimeSliced", 4)

    for rel in OPERATION_FILES:
        _apply(tb, rel)
    done = {}
    for op in ("program-gzip", "reset-gpu", "drain-xpu"):
        done[op] = eventually(lambda o=op: _op_done(client, o), 90, f"operation {op}")
        assert done[op]["status"]["phase"] == "Succeeded", done[op]["status"]
    n3000 = _target(client, done["program-gzip"], "fpga")
    assert n3000["status"]["device"]["model"].startswith("PAC N3000")
    assert n3000["status"]["device"]["fpga"]["afuId"] == AFUS["n3000/gzip-v1.gbs"]
    gpu = _target(client, done["reset-gpu"], "gpu")
    (result,) = done["reset-gpu"]["status"]["results"]
    assert (result["accelerator"], result["reason"]) == (gpu["metadata"]["name"], "Reset")
    xpu_acc = _target(client, done["drain-xpu"], "xpu")
    assert xpu_acc["spec"]["cordoned"] is True

    for rel in CLAIM_FILES:
        _apply(tb, rel)
    pods = ["any-gpu", "h100", "gpu-nic-same-root", "h200-else-xpu", "fpga-crypto", "sriov-vf"]
    pods.append("xpu-from-template")
    eventually(lambda: _all_running(client, NAMESPACE, pods), 150, "every example pod Running")
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
    assert node_of["gpu-nic-same-root"] in ("gpu-server", "edge-node")
    pair = {r.request: r.device for r in _results(client, "gpu-nic-same-root")}
    assert sorted(pair) == ["gpu", "nic"] and "-vf" not in pair["nic"], pair  # a PF, not a VF
    paired = {
        req: _acc(client, f"{node_of['gpu-nic-same-root']}-{dev}")["status"]["device"]
        for req, dev in pair.items()
    }
    assert (paired["gpu"]["type"], paired["nic"]["type"]) == ("gpu", "nic")
    assert paired["gpu"]["pcieRoot"] == paired["nic"]["pcieRoot"]
    (xpu,) = _results(client, "h200-else-xpu")
    assert (node_of["h200-else-xpu"], xpu.request) == ("kunlun-node", "acc/xpu")
    assert xpu.device != xpu_acc["spec"]["deviceName"]  # the drained XPU is cordoned
    assert node_of["fpga-crypto"] == "fpga-node"
    (fpga,) = _results(client, "fpga-crypto")
    assert f"fpga-node-{fpga.device}" == n3000["metadata"]["name"]
    programmed = eventually(
        lambda: (
            _acc(client, n3000["metadata"]["name"])["status"]["device"]["fpga"].get("afuId")
            == AFUS["n3000/crypto-offload-v3.gbs"]
        ),
        60,
        "crypto-offload-v3 AFU on the N3000",
    )
    assert programmed
    (vf,) = _results(client, "sriov-vf")
    assert "-vf" in vf.device
    records = tb.node(node_of["sriov-vf"]).container_records(namespace=NAMESPACE, pod="sriov-vf")
    assert records and records[-1].cdi_devices
    assert node_of["xpu-from-template"] == "kunlun-node"
    # the demo's own workloads kept their devices
    demo_pods = [f"{n}-pod" for n in DEMO_CLAIMS]
    assert _all_running(client, DEMO_NAMESPACE, demo_pods)


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
