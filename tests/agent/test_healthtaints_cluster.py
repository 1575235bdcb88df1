"""Health taints on the testbed: XIDs injected into the synthetic NVML, seen by the node agent's
telemetry, become ResourceSlice taints that the real scheduler and kube-controller-manager act on.

One node with the node stack (agent with telemetry at 1 s, ``--health-taints``) on the 8-GPU
host: a pod runs on a GPU; XID 79 on that GPU and XID 92 on another at once ->

* the first is tainted ``NoExecute`` and the kube-controller-manager's device-taint eviction
  deletes its pod;
* the second is tainted ``None`` (degraded) and a claim asking for exactly that GPU still gets
  it, its pod Running;
* both lifted once the hold has passed without another fault; every step an Event on the Node
  and a metric.

And with the GPUs served by the device plugin: the faults make them Unhealthy in ListAndWatch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME, HEALTH_TAINT
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from tests.metrics.scrape import value
from tests.nodestack import NodeStack, allocated_device, claim, claim_pod, node_stack, pod_phase
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

#: Long enough to schedule a pod onto the degraded GPU while its taint is there.
HOLD_S = 30


def _inject(stack: NodeStack, xids: dict[str, list[int]]) -> None:
    """Each GPU's (by UUID) XID history, written at once as the synthetic NVML reads it."""
    path = stack.host / ".synthetic" / "telemetry.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": {u: {"xids": x} for u, x in xids.items()}}))
    os.replace(tmp, path)


def _health(stack: NodeStack, gpu: str) -> list[dict[str, Any]]:
    dev = stack.slice_device(gpu) or {}
    return [
        {k: t.get(k) for k in ("key", "value", "effect")}
        for t in dev.get("taints") or []
        if t["key"] == HEALTH_TAINT
    ]


def _gpus(stack: NodeStack) -> list[str]:
    """The node's whole GPUs, as published."""
    out = []
    for s in stack.client.list(
        ResourceSlice, fields={"spec.nodeName": stack.node, "spec.driver": DRIVER_NAME}
    ):
        for d in as_dict(s)["spec"].get("devices") or []:
            attrs = d.get("attributes") or {}
            if attrs.get("type") == {"string": "gpu"} and "migProfile" not in attrs:
                out.append(str(d["name"]))
    return sorted(out)


def _uuid(stack: NodeStack, gpu: str) -> str:
    dev = stack.slice_device(gpu)
    assert dev is not None, gpu
    return str(dev["attributes"]["uuid"]["string"])


def _gone(client: Client, name: str, ns: str) -> bool:
    try:
        client.get(Pod, name, namespace=ns)
    except ApiError as exc:
        return exc.status.code == 404
    return False


def _node_events(client: Client, node: str, reason: str) -> list[str]:
    return [
        e.message or ""
        for e in client.list(Event, namespace="default")
        if e.involvedObject and e.involvedObject.name == node and e.reason == reason
    ]


def test_xid_79_evicts_the_pod_and_xid_92_leaves_the_gpu_usable_until_lifted(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    port = free_port()
    args = [
        f"--metrics-address=127.0.0.1:{port}",
        "--telemetry-interval=1",
        "--health-taints",
        f"--health-taint-hold={HOLD_S}",
    ]
    with node_stack(testbed, tmp_path, "dgx-h100", agent_args=args) as stack:
        kube_client.create(claim("train", ns, "gpu.kubeacc.io"))
        kube_client.create(claim_pod("trainer", ns, "train"))
        eventually(lambda: pod_phase(kube_client, "trainer", ns) == "Running", 90, "pod Running")
        lost = allocated_device(kube_client, "train", ns)
        assert lost is not None
        degraded = next(g for g in _gpus(stack) if g != lost)
        degraded_uuid = _uuid(stack, degraded)
        assert _health(stack, lost) == [] and _health(stack, degraded) == []

        _inject(stack, {_uuid(stack, lost): [79], degraded_uuid: [92]})
        eventually(
            lambda: (
                _health(stack, lost)
                == [{"key": HEALTH_TAINT, "value": "xid-79", "effect": "NoExecute"}]
            ),
            30,
            "the lost GPU tainted NoExecute",
        )
        assert _health(stack, degraded) == [
            {"key": HEALTH_TAINT, "value": "xid-92", "effect": "None"}
        ]
        # the kube-controller-manager's device-taint eviction, not kube-acc, deletes the pod
        eventually(lambda: _gone(kube_client, "trainer", ns), 60, "the pod evicted")

        # the degraded GPU is still given out
        sel = f'device.attributes["kubeacc.io"].uuid == "{degraded_uuid}"'
        kube_client.create(claim("on-degraded", ns, "gpu.kubeacc.io", sel))
        kube_client.create(claim_pod("still-works", ns, "on-degraded"))
        eventually(
            lambda: pod_phase(kube_client, "still-works", ns) == "Running", 90, "pod Running"
        )
        assert allocated_device(kube_client, "on-degraded", ns) == degraded
        assert _health(stack, degraded)  # it was allocated while tainted

        tainted = _node_events(kube_client, stack.node, "DeviceTainted")
        assert any(f"device {lost}: tainted NoExecute (xid-79)" in m for m in tainted), tainted
        assert any(f"device {degraded}: tainted None (xid-92)" in m for m in tainted), tainted
        assert value(port, "kubeacc_agent_health_taint_steps_total", step="added") == 2
        assert value(port, "kubeacc_agent_health_taints", effect="NoExecute") == 1

        # -- no further fault: both lifted after the hold ------------------------------------
        eventually(
            lambda: _health(stack, lost) == [] and _health(stack, degraded) == [],
            HOLD_S + 30,
            "the health taints lifted",
        )
        lifted = _node_events(kube_client, stack.node, "DeviceTaintLifted")
        assert any(f"device {lost}: health taint xid-79" in m for m in lifted), lifted
        assert value(port, "kubeacc_agent_health_taint_steps_total", step="lifted") == 2
        assert value(port, "kubeacc_agent_health_taints") == 0
        assert pod_phase(kube_client, "still-works", ns) == "Running"


def test_device_plugin_gpus_with_a_fault_are_unhealthy_until_lifted(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    """GPUs served by the device plugin have no slice: XID 79 and XID 94 make them Unhealthy in
    ListAndWatch (the kubelet's allocatable drops by two), XID 92 (degraded) does not; lifted
    after the hold, all eight are allocatable again."""
    port = free_port()
    hold = 10
    args = [
        f"--metrics-address=127.0.0.1:{port}",
        "--telemetry-interval=1",
        "--health-taints",
        f"--health-taint-hold={hold}",
        "--device-plugin-type=gpu",
        f"--device-plugin-dir={testbed.node(testbed.node_name).device_plugin_dir}",
    ]
    with node_stack(testbed, tmp_path, "dgx-h100", agent_args=args) as stack:

        def allocatable() -> str:
            status = kube_client.get(Node, stack.node).status
            return str(((status.allocatable if status else None) or {}).get("kubeacc.io/gpu"))

        eventually(lambda: allocatable() == "8", 60, "8 GPUs advertised")
        gpus = stack.gpus()
        uuids = [stack.accelerators()[g]["status"]["device"]["uuid"] for g in gpus[:3]]
        _inject(stack, {uuids[0]: [79], uuids[1]: [94], uuids[2]: [92]})
        eventually(lambda: allocatable() == "6", 30, "two GPUs Unhealthy")
        tainted = _node_events(kube_client, stack.node, "DeviceTainted")
        assert any(f"device {gpus[2]}: tainted None (xid-92)" in m for m in tainted), tainted
        eventually(lambda: allocatable() == "8", hold + 40, "lifted: 8 again")
        assert value(port, "kubeacc_agent_health_taint_steps_total", step="lifted") == 3
