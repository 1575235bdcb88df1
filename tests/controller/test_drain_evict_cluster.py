"""Drain by eviction on the testbed: a Drain operation with ``spec.evict`` creates a
DeviceTaintRule, the real kube-controller-manager evicts the pod that holds the GPU, the drain
succeeds, and Uncordon deletes the rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event, Pod

from kubeacc.controller.taintrules import DRAIN_TAINT, DeviceTaintRule, rule_name
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.testbed import Testbed
from tests.nodestack import allocated_device, claim, claim_pod, node_stack, pod_phase
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]


def _gone(client: Client, kind: type, name: str, ns: str | None = None) -> bool:
    try:
        if ns is None:
            client.get(kind, name)
        else:
            client.get(kind, name, namespace=ns)
    except ApiError as exc:
        return exc.status.code == 404
    return False


def test_a_drain_with_evict_taints_the_gpu_and_its_pod_is_evicted(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    with node_stack(testbed, tmp_path, "dgx-h100") as stack:
        kube_client.create(claim("train", ns, "gpu.kubeacc.io"))
        kube_client.create(claim_pod("trainer", ns, "train"))
        eventually(lambda: pod_phase(kube_client, "trainer", ns) == "Running", 90, "pod Running")
        gpu = allocated_device(kube_client, "train", ns)
        assert gpu is not None
        acc = f"{stack.node}-{gpu}"
        eventually(lambda: gpu in stack.accelerators(), 60, "the GPU's Accelerator")

        stack.operation(ns, "evict", "Drain", [acc], evict=True, timeoutSeconds=120)
        got = eventually(
            lambda: (
                not _gone(kube_client, DeviceTaintRule, rule_name(acc))
                and as_dict(kube_client.get(DeviceTaintRule, rule_name(acc)))
            ),
            30,
            "the DeviceTaintRule",
        )
        assert got["spec"]["deviceSelector"] == {
            "driver": "kubeacc.io",
            "pool": stack.node,
            "device": gpu,
        }
        assert (got["spec"]["taint"]["key"], got["spec"]["taint"]["effect"]) == (
            DRAIN_TAINT,
            "NoExecute",
        )
        # the kube-controller-manager's device-taint eviction deletes the pod; nobody else does
        eventually(lambda: _gone(kube_client, Pod, "trainer", ns), 60, "the pod evicted")
        op = stack.finished(ns, "evict", 120)
        assert op["status"]["phase"] == "Succeeded", op["status"]
        reasons = {
            e.reason
            for e in kube_client.list(Event, namespace=ns)
            if e.involvedObject and e.involvedObject.name == "evict"
        }
        assert "DeviceTaintRuleCreated" in reasons, reasons

        stack.operation(ns, "lift", "Uncordon", [acc])
        op = stack.finished(ns, "lift", 60)
        assert op["status"]["phase"] == "Succeeded", op["status"]
        assert f"DeviceTaintRules deleted: {rule_name(acc)}" in op["status"]["message"]
        assert _gone(kube_client, DeviceTaintRule, rule_name(acc))
