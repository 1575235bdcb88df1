"""Every AcceleratorPolicy shape gives a DeviceClass whose claims the node agent prepares: the
controller generates the class, the real scheduler allocates through it, the real kubelet asks
our agent to prepare the claim, and the pod runs with the sharing settings in its CDI env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_policy
from tests.nodestack import claim, claim_pod, device_class_exists, node_stack, pod_phase
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]


def _device(stack_accs: dict[str, dict[str, Any]], prefix: str) -> dict[str, Any]:
    return next(
        a["status"]["device"]
        for d, a in sorted(stack_accs.items())
        if d.startswith(prefix) and "device" in (a.get("status") or {})
    )


def test_every_policy_shape_prepares_on_the_kubelet(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    with node_stack(testbed, tmp_path, "large-mixed") as stack:
        accs = eventually(
            # both kinds written, status included (the agent writes device after device, and
            # an Accelerator's status after the object)
            lambda: (
                (a := stack.accelerators())
                and all(
                    any(
                        d.startswith(p) and "device" in (o.get("status") or {})
                        for d, o in a.items()
                    )
                    for p in ("fpga-", "nic-")
                )
                and a
            ),
            60,
            "Accelerators",
        )
        nic, fpga = _device(accs, "nic-"), _device(accs, "fpga-")
        shapes: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
            "gpu-timesliced": (
                {
                    "selector": {"types": ["gpu"]},
                    "sharing": {"mode": "TimeSliced", "maxConsumers": 4},
                },
                {"KUBEACC_SHARING_MODE": "TimeSliced", "KUBEACC_SHARING_MAX_CONSUMERS": "4"},
            ),
            "nic-by-vendor": (
                {"selector": {"types": ["nic"], "vendors": [nic["vendor"]]}},
                {"KUBEACC_SHARING_MODE": "Exclusive", "KUBEACC_SHARING_MAX_CONSUMERS": "1"},
            ),
            "fpga-by-model": (
                {
                    "selector": {"types": ["fpga"], "models": [fpga["model"]]},
                    "sharing": {"mode": "Exclusive", "maxConsumers": 1},
                    "allowedNamespaces": [namespace],
                    "allowedBitstreams": [{"name": "nlb/nlb0.gbs", "sha256": "a" * 64}],
                    "onUnhealthy": "Drain",
                },
                {"KUBEACC_SHARING_MODE": "Exclusive"},
            ),
            "anything-memory": (
                {
                    "sharing": {
                        "mode": "MemoryShared",
                        "maxConsumers": 2,
                        "memoryPerConsumerBytes": 4 << 30,
                    },
                    "deviceClass": {"name": "shared-anything.example.com"},
                },
                # the class selects only memory-shared devices, which the agent publishes for
                # this policy: the claim names no memory, so its share is a whole H100's (the
                # request policy's default), and a share's limit wins over the policy's
                {"KUBEACC_SHARING_MODE": "MemoryShared", "KUBEACC_DEVICE_MEMORY_LIMIT": "81559"},
            ),
        }
        classes = {
            "gpu-timesliced": "gpu-timesliced.policy.kubeacc.io",
            "nic-by-vendor": "nic-by-vendor.policy.kubeacc.io",
            "fpga-by-model": "fpga-by-model.policy.kubeacc.io",
            "anything-memory": "shared-anything.example.com",
        }
        for name, (spec, _) in shapes.items():
            put_policy(kube_client, name, spec)
        for name, cls in classes.items():
            eventually(lambda c=cls: device_class_exists(kube_client, c), 30, f"DeviceClass {cls}")
            kube_client.create(claim(name, namespace, cls))
            kube_client.create(claim_pod(name, namespace, name))
        for name, (_, want) in shapes.items():
            eventually(
                lambda n=name: pod_phase(kube_client, n, namespace) == "Running",
                120,
                f"pod of policy {name} Running",
            )
            uid = kube_client.get(ResourceClaim, name, namespace=namespace).metadata.uid  # type: ignore[union-attr]
            env = dict(
                e.split("=", 1)
                for e in stack.cdi_spec(str(uid))["devices"][0]["containerEdits"]["env"]
            )
            assert env["KUBEACC_SHARING_POLICY"] == name
            for key, value in want.items():
                assert env[key] == value, (name, key, env)
