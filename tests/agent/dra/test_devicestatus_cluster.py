"""Device status on the testbed: the agent (with its own certificate identity and
deploy/rbac/agent.yaml) fills a claim's ``status.devices`` at prepare -- a GPU's UUID, a NIC's
interface, hardware address and IPs, a MIG partition's instance UUID (the one its container
sees) -- and removes its entries at unprepare."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.crds.resources import as_dict
from kubeacc.node import cdi
from kubeacc.testbed.identities import agent_cert_client
from kubeacc.testbed.testbed import Testbed
from tests.nodestack import claim_pod, node_stack, pod_phase, resource_claim
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]


def _status(client: Client, name: str, ns: str) -> list[dict[str, Any]]:
    claim = as_dict(client.get(ResourceClaim, name, namespace=ns))
    return list((claim.get("status") or {}).get("devices") or [])


def test_prepare_writes_device_status_and_unprepare_removes_it(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    with node_stack(testbed, tmp_path, "dgx-h100") as stack:
        requests = [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}},
            {"name": "nic", "exactly": {"deviceClassName": "nic.kubeacc.io"}},
            {"name": "mig", "exactly": {"deviceClassName": "mig.kubeacc.io"}},
        ]
        # An opaque config in the allocation: the status is still written (a server-side
        # apply of it is refused for a node agent, docs/dra.md "Device status").
        config = [
            {
                "requests": ["gpu"],
                "opaque": {
                    "driver": "kubeacc.io",
                    "parameters": {
                        "apiVersion": "kubeacc.io/v1alpha1",
                        "kind": "GpuConfig",
                        "env": {"MY_SETTING": "on"},
                    },
                },
            }
        ]
        kube_client.create(resource_claim("both", ns, requests, config))
        kube_client.create(claim_pod("user", ns, "both"))
        eventually(lambda: pod_phase(kube_client, "user", ns) == "Running", 90, "pod Running")
        claim = as_dict(kube_client.get(ResourceClaim, "both", namespace=ns))
        results = claim["status"]["allocation"]["devices"]["results"]
        gpu, nic, mig = (r["device"] for r in results)
        devices = eventually(
            lambda: len(s := _status(kube_client, "both", ns)) == 3 and s, 30, "status.devices"
        )
        by_name = {d["device"]: d for d in devices}
        assert set(by_name) == {gpu, nic, mig}
        for d in devices:
            assert (d["driver"], d["pool"]) == ("kubeacc.io", stack.node)
            [ready] = d["conditions"]
            assert (ready["type"], ready["status"]) == ("Ready", "True")
            assert ready["reason"] == "Prepared"
        gpu_slice = stack.slice_device(gpu)
        assert gpu_slice is not None
        assert by_name[gpu]["data"]["uuid"] == gpu_slice["attributes"]["uuid"]["string"]
        nic_slice = stack.slice_device(nic)
        assert nic_slice is not None
        net = by_name[nic]["networkData"]
        ifname = net["interfaceName"]
        address = (stack.host / "sys/class/net" / ifname / "address").read_text().strip()
        assert net["hardwareAddress"] == address  # the IPoIB address, 20 octets
        [v4, v6] = net["ips"]  # what the host has on it (kubeacc.synthetic.hosts_gpu.connectx7)
        assert re.fullmatch(r"10\.1\d\d\.0\.11/16", v4)
        assert re.fullmatch(r"fd00:ac:(\w+:)?:11/64", v6)
        mig_slice = stack.slice_device(mig)
        assert mig_slice is not None
        mig_data = by_name[mig]["data"]
        assert mig_data["migProfile"] == mig_slice["attributes"]["migProfile"]["string"]
        assert mig_data["uuid"].startswith("MIG-")
        assert mig_data["parentUUID"] == mig_slice["attributes"]["parentUUID"]["string"]
        visible = json.loads(
            cdi.spec_path(stack.agent.cdi_dir, claim["metadata"]["uid"]).read_text()
        )
        assert mig_data["uuid"] in _visible(visible)  # what the container is given
        assert (
            by_name[nic]["data"]["pciBusID"]
            == (nic_slice["attributes"]["resource.kubernetes.io/pciBusID"]["string"])
        )

        # the same, for the container to read (KEP-5304): each request's file, mounted by CDI
        (rec,) = testbed.kubelet.container_records(namespace=ns, pod="user")
        mounts = _cdi_mounts(stack.agent.cdi_dir, rec.cdi_devices)
        base = "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/both"
        for request, device in (("gpu", gpu), ("nic", nic), ("mig", mig)):
            host_file = Path(mounts[f"{base}/{request}/kubeacc.io-metadata.json"])
            first = json.loads(host_file.read_text().splitlines()[0])
            assert first["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
            [meta] = first["requests"][0]["devices"]
            assert meta["name"] == device
            if request == "nic":
                assert meta["networkData"] == net
            else:
                assert meta["attributes"]["uuid"] == {"string": by_name[device]["data"]["uuid"]}

        _others_refused(testbed, tmp_path, ns, stack.node, devices)

        kube_client.delete(Pod, "user", namespace=ns)
        eventually(lambda: _status(kube_client, "both", ns) == [], 60, "entries removed")


def _others_refused(
    testbed: Testbed, tmp: Path, ns: str, node: str, devices: list[dict[str, Any]]
) -> None:
    """deploy/admission: another node's agent may not touch this claim's status, and this
    node's agent may write only its own pool's entries, never the allocation."""

    def patch(client: Client, status: dict[str, Any]) -> str:
        try:
            client.patch(
                ResourceClaim.Status,
                "both",
                {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "status": status},
                namespace=ns,
                patch_type=PatchType.MERGE,
            )
        except ApiError as exc:
            return str(exc.status.message)
        return ""

    other = agent_cert_client(testbed, "node-elsewhere", tmp / "other")
    refused = patch(other, {"devices": [{**devices[0], "data": {"forged": "yes"}}]})
    assert "may only write the status of claims allocated a kubeacc.io device" in refused
    own = agent_cert_client(testbed, node, tmp / "own")
    foreign = {**devices[0], "driver": "gpu.example.com"}
    assert "gpu.example.com" in patch(own, {"devices": [*devices, foreign]})  # not its driver
    assert patch(own, {"reservedFor": []}) != ""  # the kubelet's, not the agent's


def _visible(spec: dict[str, Any]) -> set[str]:
    """Every UUID in the CDI spec's NVIDIA_VISIBLE_DEVICES."""
    out: set[str] = set()
    for dev in spec["devices"]:
        for kv in dev["containerEdits"].get("env", []):
            key, _, value = kv.partition("=")
            if key == "NVIDIA_VISIBLE_DEVICES":
                out.update(value.split(","))
    return out


def _cdi_mounts(cdi_dir: Path, names: tuple[str, ...]) -> dict[str, str]:
    """Container path -> host path of the mounts the container's CDI devices bring."""
    out = {}
    for spec_file in cdi_dir.glob("kubeacc.io-claim_*.json"):
        spec = json.loads(spec_file.read_text())
        for dev in spec["devices"]:
            if f"{spec['kind']}={dev['name']}" in names:
                for m in dev["containerEdits"].get("mounts", []):
                    out[m["containerPath"]] = m["hostPath"]
    return out
