"""Remediation on the testbed: a fault injected into the synthetic NVML, seen by the node agent's
telemetry, reported on the Accelerator, and handled by the controller under the policy.

One node (the testbed's kubelet) with the whole node stack (controller, life-cycle agent, node
agent with telemetry at 1 s) on the 8-GPU host:

1. XID 79 on a GPU a pod uses -> the GPU cordoned, a Reset with drainFirst created, the pod's
   owner told (Events on the Pod and its claim) -> the owner deletes the pod -> the reset runs
   on the node -> the device is healthy -> back in service (uncordoned, ``Remediation`` False
   ``Returned``);
2. the same GPU failing again within the back-off -> left cordoned for a person, no operation;
3. a burst of XID 79 on three idle GPUs under ``maxDevicesOut: 1`` -> one reset, two held back;
   an Uncordon operation by a person returns one of them.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.contracts.names import CORDONED_BY_ANNOTATION
from kubeacc.controller.remediator import (
    CONDITION,
    FAULT_ANNOTATION,
    HOLD,
    OUT,
    REMEDIATION_LABEL,
    RETURNED_ANNOTATION,
)
from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, AcceleratorPolicy, as_dict
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_policy
from tests.nodestack import NodeStack, allocated_device, claim, claim_pod, node_stack, pod_phase
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

POLICY = "remediate-xid"
#: Where the controller of tests.crdfixtures.make_controller creates remediation operations.
OPS_NAMESPACE = "default"


def _section(max_out: int) -> dict[str, Any]:
    return {
        "selector": {"types": ["gpu"]},
        "remediation": {
            "rules": [{"event": "Xid", "xids": [79], "action": "DrainAndReset"}],
            "perNode": {"max": 10},
            "perFleet": {"max": 10},
            "maxDevicesOut": max_out,
            "backoffSeconds": 3600,
        },
    }


def _inject(stack: NodeStack, xids: dict[str, list[int]]) -> None:
    """Each GPU's (by UUID) XID history, written at once as the synthetic NVML reads it."""
    path = stack.host / ".synthetic" / "telemetry.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": {u: {"xids": x} for u, x in xids.items()}}))
    os.replace(tmp, path)


def _uuid(acc: dict[str, Any]) -> str:
    return str(acc["status"]["device"]["uuid"])


def _notes(acc: dict[str, Any]) -> dict[str, str]:
    return dict(acc["metadata"].get("annotations") or {})


def _condition(acc: dict[str, Any]) -> dict[str, str] | None:
    conds = (acc.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == CONDITION), None)


def _reasons(client: Client, ns: str, name: str, uid: str | None = None) -> list[str]:
    """Reasons of the Events about ``name`` (and, given ``uid``, about that object only: the
    testbed keeps the Events of earlier tests' objects of the same name)."""
    return [
        e.reason or ""
        for e in client.list(Event, namespace=ns)
        if e.involvedObject
        and e.involvedObject.name == name
        and (uid is None or e.involvedObject.uid == uid)
    ]


def _remediation_ops(client: Client) -> list[dict[str, Any]]:
    return [
        as_dict(o)
        for o in client.list(
            AcceleratorOperation, namespace=OPS_NAMESPACE, labels={REMEDIATION_LABEL: "true"}
        )
    ]


def _cordoned_by(stack: NodeStack, gpu: str) -> str | None:
    acc = stack.accelerators()[gpu]
    return _notes(acc).get(CORDONED_BY_ANNOTATION) if acc["spec"].get("cordoned") else None


@pytest.fixture
def fresh(testbed: Testbed, kube_client: Client) -> Any:
    """No Accelerators of the node from earlier tests (their annotations would count), and no
    remediation operations or policy left behind."""

    def clean() -> None:
        for acc in kube_client.list(Accelerator, labels={NODE_LABEL: testbed.node_name}):
            with contextlib.suppress(ApiError):
                kube_client.delete(Accelerator, acc.metadata.name if acc.metadata else "")
        for op in _remediation_ops(kube_client):
            with contextlib.suppress(ApiError):
                kube_client.delete(
                    AcceleratorOperation, op["metadata"]["name"], namespace=OPS_NAMESPACE
                )
        with contextlib.suppress(ApiError):
            kube_client.delete(AcceleratorPolicy, POLICY)

    clean()
    yield
    clean()


@pytest.mark.usefixtures("fresh")
def test_xid_79_on_a_gpu_in_use_is_drained_reset_and_returned(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    args = [f"--metrics-address=127.0.0.1:{free_port()}", "--telemetry-interval=1"]
    with node_stack(testbed, tmp_path, "dgx-h100", agent_args=args) as stack:
        stack.gpus()
        put_policy(kube_client, POLICY, _section(max_out=1))
        kube_client.create(claim("train", ns, "gpu.kubeacc.io"))
        kube_client.create(claim_pod("trainer", ns, "train"))
        eventually(lambda: pod_phase(kube_client, "trainer", ns) == "Running", 90, "pod Running")
        gpu = allocated_device(kube_client, "train", ns)
        assert gpu is not None
        eventually(lambda: len(stack.users(gpu)) == 2, 30, "allocatedTo: the claim and the pod")
        acc_name = f"{stack.node}-{gpu}"
        uuid = _uuid(stack.accelerators()[gpu])

        # -- 1. XID 79 -> cordoned, Reset with drainFirst, the owner told --------------------
        _inject(stack, {uuid: [79]})
        fault = eventually(
            lambda: (stack.accelerators()[gpu].get("status") or {}).get("lastFault"),
            30,
            "the agent reports the fault on the Accelerator",
        )
        assert (fault["event"], fault["xid"]) == ("Xid", 79)
        eventually(lambda: _cordoned_by(stack, gpu) == OUT, 30, "cordoned for remediation")
        [op] = eventually(_remediation_ops_of(kube_client), 30, "the remediation operation")
        assert op["spec"] == {
            "action": "Reset",
            "targets": [acc_name],
            "drainFirst": True,
            "timeoutSeconds": 600,
        }
        op_name = op["metadata"]["name"]
        eventually(
            lambda: (c := _condition(stack.accelerators()[gpu])) and c["reason"] == "Draining",
            30,
            "condition Remediation Draining",
        )
        eventually(
            lambda: "DeviceRemediationDraining" in _reasons(kube_client, ns, "trainer"),
            30,
            "an Event on the pod for its owner",
        )
        # each holder's Event is its own write, after the condition's: wait for each
        eventually(
            lambda: "DeviceRemediationDraining" in _reasons(kube_client, ns, "train"),
            30,
            "an Event on the claim for its owner",
        )
        assert pod_phase(kube_client, "trainer", ns) == "Running"  # drained, not killed
        assert not any(p.endswith("/reset") for p, _ in stack.kernel.writes)

        # -- the owner lets go -> reset -> healthy -> back in service -----------------------
        kube_client.delete(Pod, "trainer", namespace=ns)
        kube_client.delete(ResourceClaim, "train", namespace=ns)
        done = stack.finished(OPS_NAMESPACE, op_name, 180)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        bdf = stack.accelerators()[gpu]["status"]["device"]["pciBusID"]
        assert any(p.endswith(f"{bdf}/reset") for p, _ in stack.kernel.writes)
        back = eventually(
            lambda: (
                (a := stack.accelerators()[gpu])
                and not a["spec"].get("cordoned")
                and (_condition(a) or {}).get("reason") == "Returned"
                and a
            ),
            30,
            "back in service",
        )
        assert _condition(back)["status"] == "False"  # type: ignore[index]
        assert RETURNED_ANNOTATION in _notes(back)
        assert _notes(back)[FAULT_ANNOTATION] == fault["time"]
        # the Event of a step is recorded after its condition is written
        eventually(
            lambda: (
                {"RemediationDraining", "RemediationReturned"}
                <= set(_reasons(kube_client, "default", acc_name, back["metadata"]["uid"]))
            ),
            30,
            "the Events of the steps on the Accelerator",
        )

        # -- 2. failing again within the back-off -> left for a person ----------------------
        _inject(stack, {uuid: [79, 79]})
        # The cordon (spec) and the condition (status) are two writes: wait for both.
        held = eventually(
            lambda: (
                (a := stack.accelerators()[gpu])
                and _cordoned_by(stack, gpu) == HOLD
                and (_condition(a) or {}).get("reason") == "HandedToAdmin"
                and a
            ),
            30,
            "left cordoned for a person, handed to an admin",
        )
        assert "back-off" in _condition(held)["message"]  # type: ignore[index]
        assert [o["metadata"]["name"] for o in _remediation_ops(kube_client)] == [op_name]

        # -- 3. a burst on three idle GPUs under maxDevicesOut 1 ----------------------------
        others = [g for g in sorted(stack.accelerators()) if g.startswith("gpu-") and g != gpu]
        burst = others[:3]
        accs = stack.accelerators()
        _inject(stack, {uuid: [79, 79], **{_uuid(accs[g]): [79] for g in burst}})
        eventually(
            lambda: all(_notes(stack.accelerators()[g]).get(FAULT_ANNOTATION) for g in burst),
            30,
            "the three faults handled",
        )
        new_ops = [o for o in _remediation_ops(kube_client) if o["metadata"]["name"] != op_name]
        assert len(new_ops) == 1, new_ops
        [reset] = new_ops[0]["spec"]["targets"]
        held_back = [g for g in burst if f"{stack.node}-{g}" != reset]
        assert len(held_back) == 2
        for g in held_back:
            assert _cordoned_by(stack, g) == HOLD
            c = _condition(stack.accelerators()[g])
            assert c is not None and c["reason"] == "HeldBack", c
            assert "maxDevicesOut 1" in c["message"]
        done = stack.finished(OPS_NAMESPACE, new_ops[0]["metadata"]["name"], 120)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        returned = reset.removeprefix(f"{stack.node}-")
        eventually(lambda: _cordoned_by(stack, returned) is None, 30, "the reset one returned")
        assert all(_cordoned_by(stack, g) == HOLD for g in held_back)

        # -- a person returns a held device with an Uncordon operation ----------------------
        stack.operation(ns, "uncordon", "Uncordon", [f"{stack.node}-{held_back[0]}"])
        assert stack.finished(ns, "uncordon")["status"]["phase"] == "Succeeded"
        eventually(
            lambda: (
                (_condition(stack.accelerators()[held_back[0]]) or {}).get("reason") == "Uncordoned"
            ),
            30,
            "condition Remediation False Uncordoned",
        )
        assert _cordoned_by(stack, held_back[1]) == HOLD


def _remediation_ops_of(client: Client) -> Any:
    return lambda: _remediation_ops(client) or None


@pytest.mark.usefixtures("fresh")
def test_a_health_check_failing_three_times_hands_the_gpu_to_an_admin(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    """``HealthFailing`` with ``failures: 3``: the agent counts the passes that find the GPU
    unhealthy (lost: NVML no longer sees it) and reports the third; the controller hands it to
    an admin, and its metrics say so. The same loss is also ``FallenOffBus``, which no rule of
    this policy covers."""
    args = [f"--metrics-address=127.0.0.1:{free_port()}", "--telemetry-interval=1"]
    with node_stack(testbed, tmp_path, "dgx-h100", agent_args=args) as stack:
        gpus = stack.gpus()
        rules = [{"event": "HealthFailing", "failures": 3, "action": "HandToAdmin"}]
        put_policy(
            kube_client,
            POLICY,
            {"selector": {"types": ["gpu"]}, "remediation": {"rules": rules}},
        )
        gpu = gpus[3]
        _inject_lost(stack, _uuid(stack.accelerators()[gpu]))

        def health_fault() -> dict[str, Any] | None:
            fault = (stack.accelerators()[gpu].get("status") or {}).get("lastFault") or {}
            return fault if fault.get("event") == "HealthFailing" else None

        fault = eventually(health_fault, 60, "HealthFailing reported on the Accelerator")
        assert fault["failures"] == 3 and "NVML" in fault["detail"], fault  # discovery's reason
        eventually(lambda: _cordoned_by(stack, gpu) == HOLD, 30, "handed to an admin")
        c = _condition(stack.accelerators()[gpu])
        assert c is not None and c["reason"] == "HandedToAdmin", c
        assert "health check failing 3 times" in c["message"], c
        assert _remediation_ops(kube_client) == []  # cordoned only, no operation
        out = {  # the dashboard's "devices out of service and why"
            (s.labels["device"], s.labels["reason"])
            for m in stack.controller.metrics.registry.collect()
            if m.name == "kubeacc_controller_devices_out_of_service"
            for s in m.samples
        }
        assert out == {(gpu, "HandedToAdmin")}
        assert all(_cordoned_by(stack, g) is None for g in stack.accelerators() if g != gpu)


def _inject_lost(stack: NodeStack, uuid: str) -> None:
    path = stack.host / ".synthetic" / "telemetry.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": {uuid: {"lost": True}}}))
    os.replace(tmp, path)
