"""A ``MIG`` AcceleratorPolicy on the testbed: the node agent publishes, for the MIG GPUs the
policy selects, only the placements of its profiles (plus the whole GPU unless the policy says
otherwise), a claim through the DeviceClass the controller generates gets such a partition and
the synthetic NVML makes its instance, and a GPU that offers none of the profiles gets a
Warning event on the policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import AcceleratorPolicy, as_dict
from kubeacc.synthetic.nvmllib import SyntheticNVML
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_policy
from tests.hosts import discover
from tests.nodestack import claim_pod, device_class_exists, node_stack, pod_phase, resource_claim
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

H100, A100 = "gpu-0000-01-00-0", "gpu-0000-02-00-0"
POLICY = "h100-3g"
CLASS = f"{POLICY}.policy.kubeacc.io"


def devices_of(client: Client, node: str, gpu: str) -> set[str]:
    """The slice devices of one GPU: itself and its partitions."""
    out = set()
    for s in client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME}):
        for d in as_dict(s)["spec"].get("devices") or []:
            if d["name"] == gpu or d["name"].startswith(f"{gpu}-mig-"):
                out.add(d["name"])
    return out


def policy_events(client: Client, reason: str) -> list[str]:
    return [
        str(e.message)
        for e in client.list(Event, namespace="default")
        if e.reason == reason and e.involvedObject.kind == "AcceleratorPolicy"
    ]


def test_a_mig_policy_publishes_its_profiles_and_its_class_gets_one(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    with node_stack(testbed, tmp_path, "mig-pair") as stack:
        models = {d.name: d.model for d in discover(stack.host).devices if d.type.value == "gpu"}
        eventually(lambda: len(devices_of(kube_client, stack.node, H100)) > 10, 60, "partitions")
        a100_before = devices_of(kube_client, stack.node, A100)

        put_policy(
            kube_client,
            POLICY,
            {
                "selector": {"types": ["gpu"], "models": [models[H100]]},
                "sharing": {"mode": "MIG", "migProfiles": ["3g.40gb"]},
            },
        )
        only_3g = {H100, f"{H100}-mig-3g-40gb-0", f"{H100}-mig-3g-40gb-4"}
        eventually(lambda: devices_of(kube_client, stack.node, H100) == only_3g, 60, "3g.40gb only")
        assert devices_of(kube_client, stack.node, A100) == a100_before  # not selected
        eventually(lambda: device_class_exists(kube_client, CLASS), 30, f"DeviceClass {CLASS}")
        cel = as_dict(kube_client.get(DeviceClass, CLASS))["spec"]["selectors"][0]["cel"]
        assert 'has(device.attributes["kubeacc.io"].migProfile)' in cel["expression"]

        claim = resource_claim(
            "part", namespace, [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]
        )
        kube_client.create(claim)
        kube_client.create(claim_pod("part", namespace, "part"))
        eventually(lambda: pod_phase(kube_client, "part", namespace) == "Running", 120, "Running")
        got = as_dict(kube_client.get(type(claim), "part", namespace=namespace))
        (result,) = got["status"]["allocation"]["devices"]["results"]
        assert result["device"] in only_3g - {H100}
        lib = SyntheticNVML.from_file(str(stack.host / ".synthetic/nvml.json"))
        (made,) = lib.mig_view(0)[1]  # the H100's one instance, made by the prepare
        assert made["profile"] == "3g.40gb"
        (device,) = stack.cdi_spec(got["metadata"]["uid"])["devices"]
        env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == made["uuid"]
        assert env["KUBEACC_MIG_PROFILE"] == "3g.40gb"
        kube_client.delete(Pod, "part", namespace=namespace)

        # Without the whole GPU; and a profile the A100 80GB does not offer: a Warning event.
        put_policy(
            kube_client,
            POLICY,
            {
                "selector": {"types": ["gpu"], "models": [models[H100]]},
                "sharing": {"mode": "MIG", "migProfiles": ["3g.40gb"], "migWholeGpu": False},
            },
        )
        eventually(
            lambda: devices_of(kube_client, stack.node, H100) == only_3g - {H100}, 60, "no whole"
        )
        put_policy(
            kube_client,
            "a100-small",
            {
                "selector": {"types": ["gpu"], "models": [models[A100]]},
                "sharing": {"mode": "MIG", "migProfiles": ["1g.5gb"]},
            },
        )
        eventually(
            lambda: devices_of(kube_client, stack.node, A100) == {A100}, 60, "A100 whole only"
        )
        (message,) = eventually(
            lambda: policy_events(kube_client, "MigPolicyNotApplied"), 30, "Warning event"
        )
        assert f"GPU {A100}" in message and "offer none of the MIG profiles 1g.5gb" in message
        assert "1 of the 1 GPUs it selects here" in message

        kube_client.delete(AcceleratorPolicy, POLICY)
        kube_client.delete(AcceleratorPolicy, "a100-small")
        eventually(
            lambda: devices_of(kube_client, stack.node, A100) == a100_before, 60, "all again"
        )
