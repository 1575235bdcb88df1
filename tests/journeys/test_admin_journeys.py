"""A new cluster admin's journeys across components, on the multi-node testbed: kube-acc on the
GPU server (gpu-server's real kubelet), three more real nodes beside it.

1. DRA: install -> inventory visible, then with its users -> a policy with sharing -> its
   DeviceClass -> a claim through it -> pod Running -> a Reset of the busy GPU is refused -> a
   Drain waits for the pod -> the pod goes, the Drain ends -> Reset -> the device stays out of
   the scheduler's reach (cordon taint) until an Uncordon -> then a new pod gets that device.
2. Device plugin with the default config: one resource per device, so a pod holding all eight
   GPUs as ``kubeacc.io/gpu`` leaves nothing for ``kubeacc.io/gpu-<model>``; users come from the
   kubelet's pod-resources API; a cordon makes the GPU Unhealthy (allocatable 7) until Uncordon.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.agent.cordons import CORDON_TAINT
from kubeacc.crds.resources import AcceleratorOperation, as_dict
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_policy
from tests.journeys.conftest import GPU_NODE
from tests.nodestack import (
    allocated_device,
    claim,
    claim_pod,
    device_class_exists,
    node_stack,
    pod_phase,
    resource_pod,
    unschedulable,
)
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster]

GPU_COUNT = 8  # the dgx-h100 profile


def _condition(op: dict[str, object], type_: str) -> dict[str, str]:
    conds = (op.get("status") or {}).get("conditions") or []  # type: ignore[attr-defined]
    return next(c for c in conds if c["type"] == type_)


def _events(client: Client, ns: str, name: str) -> list[str]:
    return [
        e.reason or ""
        for e in client.list(Event, namespace=ns)
        if e.involvedObject and e.involvedObject.name == name
    ]


def test_dra_journey(
    cluster: Testbed,
    kube_client: Client,
    multinode_namespace: str,
    tmp_path: Path,
) -> None:
    ns = multinode_namespace
    with node_stack(cluster, tmp_path, "dgx-h100", node=GPU_NODE) as stack:
        # -- inventory -----------------------------------------------------------------------
        gpus = stack.gpus(GPU_COUNT)
        # -- a policy with sharing -> its DeviceClass -----------------------------------------
        put_policy(
            kube_client,
            "shared-gpus",
            {"selector": {"types": ["gpu"]}, "sharing": {"mode": "TimeSliced", "maxConsumers": 4}},
        )
        cls = "shared-gpus.policy.kubeacc.io"
        eventually(lambda: device_class_exists(kube_client, cls), 30, "the policy's DeviceClass")
        # -- claim -> pod Running, the GPU's users ---------------------------------------------
        kube_client.create(claim("train", ns, cls))
        kube_client.create(claim_pod("trainer", ns, "train"))
        eventually(lambda: pod_phase(kube_client, "trainer", ns) == "Running", 90, "pod Running")
        trainer = kube_client.get(Pod, "trainer", namespace=ns)
        assert trainer.spec is not None and trainer.spec.nodeName == GPU_NODE
        gpu = allocated_device(kube_client, "train", ns)
        assert gpu in gpus
        uid = kube_client.get(ResourceClaim, "train", namespace=ns).metadata.uid  # type: ignore[union-attr]
        env = stack.cdi_spec(str(uid))["devices"][0]["containerEdits"]["env"]
        assert "KUBEACC_SHARING_MODE=TimeSliced" in env and "KUBEACC_SHARING_MAX_CONSUMERS=4" in env
        users = eventually(
            lambda: (u := stack.users(gpu)) and len(u) == 2 and u, 30, "allocatedTo filled"
        )
        assert {(u["kind"], u["namespace"], u["name"]) for u in users} == {
            ("ResourceClaim", ns, "train"),
            ("Pod", ns, "trainer"),
        }
        acc = f"{stack.node}-{gpu}"
        # -- a Reset of the busy GPU is refused ------------------------------------------------
        stack.operation(ns, "reset-busy", "Reset", [acc])
        op = stack.finished(ns, "reset-busy")
        assert op["status"]["phase"] == "Failed"
        failed = _condition(op, "Failed")
        assert failed["reason"] == "DeviceInUse"
        assert f"Pod {ns}/trainer" in failed["message"], failed
        assert "DeviceInUse" in _events(kube_client, ns, "reset-busy")
        assert stack.kernel.writes == [], "nothing was done to the hardware"
        # -- Drain waits for the pod ---------------------------------------------------------
        stack.operation(ns, "drain", "Drain", [acc], timeoutSeconds=300)
        draining = eventually(
            lambda: (
                (o := as_dict(stack.client.get(AcceleratorOperation, "drain", namespace=ns)))
                and any(
                    c["type"] == "Draining" and c["status"] == "True"
                    for c in (o.get("status") or {}).get("conditions") or []
                )
                and o
            ),
            30,
            "Draining=True",
        )
        assert draining["status"]["phase"] == "Pending"
        assert "trainer" in _condition(draining, "Draining")["message"]
        taint = eventually(
            lambda: [
                t
                for t in (stack.slice_device(gpu) or {}).get("taints", [])
                if t["key"] == CORDON_TAINT
            ],
            30,
            "the cordon taint in the ResourceSlice",
        )
        assert taint[0]["effect"] == "NoSchedule"
        kube_client.delete(Pod, "trainer", namespace=ns)
        op = stack.finished(ns, "drain", 120)
        assert op["status"]["phase"] == "Succeeded", op["status"]
        assert _condition(op, "Draining")["status"] == "False"
        assert stack.users(gpu) == []
        # A new claim for exactly this GPU is not allocated while it is cordoned.
        bdf = stack.accelerators()[gpu]["status"]["device"]["pciBusID"]
        pinned = f'device.attributes["resource.kubernetes.io"].pciBusID == "{bdf}"'
        kube_client.create(claim("again", ns, "gpu.kubeacc.io", pinned))
        kube_client.create(claim_pod("again", ns, "again"))
        eventually(lambda: unschedulable(kube_client, "again", ns), 60, "cordoned GPU refused")
        # -- Reset of the idle GPU -------------------------------------------------------------
        stack.operation(ns, "reset", "Reset", [acc])
        op = stack.finished(ns, "reset")
        assert op["status"]["phase"] == "Succeeded", op["status"]
        assert any(path.endswith(f"{bdf}/reset") for path, _ in stack.kernel.writes)
        assert pod_phase(kube_client, "again", ns) == "Pending"
        # -- Uncordon: the device is given out again -------------------------------------------
        stack.operation(ns, "uncordon", "Uncordon", [acc])
        op = stack.finished(ns, "uncordon")
        assert op["status"]["phase"] == "Succeeded", op["status"]
        assert not stack.accelerators()[gpu]["spec"].get("cordoned")
        eventually(lambda: pod_phase(kube_client, "again", ns) == "Running", 120, "reused")
        assert allocated_device(kube_client, "again", ns) == gpu
        assert not [
            t for t in (stack.slice_device(gpu) or {}).get("taints", []) if t["key"] == CORDON_TAINT
        ]


def test_device_plugin_journey(
    cluster: Testbed,
    kube_client: Client,
    multinode_namespace: str,
    tmp_path: Path,
) -> None:
    ns = multinode_namespace
    # Contradictory config is refused, in one line.
    bad = tmp_path / "dp.yaml"
    bad.write_text("types:\n  gpu: {generic: true, perModel: true}\n")
    run = subprocess.run(
        [sys.executable, "-m", "kubeacc.cli", "device-plugin", f"--config={bad}"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "choose one" in run.stderr, run.stderr

    plugin_dir = cluster.node(GPU_NODE).device_plugin_dir
    args = ["--device-plugin-type=gpu", f"--device-plugin-dir={plugin_dir}"]
    with node_stack(cluster, tmp_path, "dgx-h100", args, node=GPU_NODE) as stack:

        def allocatable() -> dict[str, str]:
            status = kube_client.get(Node, stack.node).status
            return dict((status.allocatable if status else None) or {})

        eventually(lambda: allocatable().get("kubeacc.io/gpu") == "8", 60, "8 GPUs advertised")
        per_model = "kubeacc.io/gpu-h100-80gb-hbm3"
        assert allocatable().get(per_model, "0") == "0"
        kube_client.create(resource_pod("all-eight", ns, {"kubeacc.io/gpu": "8"}))
        eventually(lambda: pod_phase(kube_client, "all-eight", ns) == "Running", 90, "Running")
        kube_client.create(resource_pod("one-more", ns, {per_model: "1"}))
        eventually(lambda: unschedulable(kube_client, "one-more", ns), 60, "no second owner")
        # Users from the kubelet's pod-resources API.
        gpus = stack.gpus()
        for gpu in gpus:
            users = eventually(lambda g=gpu: stack.users(g), 30, f"users of {gpu}")
            assert users == [{"kind": "Pod", "namespace": ns, "name": "all-eight"}]
        # Busy: refused; drained once the pod has gone; cordoned -> Unhealthy -> 7 allocatable.
        acc = f"{stack.node}-{gpus[0]}"
        stack.operation(ns, "reset-busy", "Reset", [acc])
        assert _condition(stack.finished(ns, "reset-busy"), "Failed")["reason"] == "DeviceInUse"
        stack.operation(ns, "drain", "Drain", [acc], timeoutSeconds=300)
        eventually(lambda: allocatable().get("kubeacc.io/gpu") == "7", 60, "cordoned: 7 left")
        kube_client.delete(Pod, "all-eight", namespace=ns)
        assert stack.finished(ns, "drain", 120)["status"]["phase"] == "Succeeded"
        eventually(lambda: stack.users(gpus[1]) == [], 30, "users gone with the pod")
        stack.operation(ns, "uncordon", "Uncordon", [acc])
        assert stack.finished(ns, "uncordon")["status"]["phase"] == "Succeeded"
        eventually(lambda: allocatable().get("kubeacc.io/gpu") == "8", 60, "uncordoned: 8")
