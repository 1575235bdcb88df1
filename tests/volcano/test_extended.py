"""Extended resources through DRA under Volcano: a pod asking ``resources.limits:
{kubeacc.io/gpu: 2}``, where no node advertises ``kubeacc.io/gpu`` and the GPUs are published
through DRA (``gpu.kubeacc.io`` names it as its ``extendedResourceName``), is placed by
kube-scheduler from the slices (tests/agent/dra/test_extended_e2e.py) but not by Volcano: its
queues' shares (``proportion``) count only what Nodes advertise, so a resource that no Node
advertises leaves every queue "overused" for the pod, before kube-scheduler's DRA filter (which
would write the claim) ever sees it. The tested statement behind docs/choosing.md, "With
Volcano"."""

from __future__ import annotations

import time

import pytest

from kubeacc.cli.demo_stack import KubeaccStack

from ..testbed.helpers import eventually
from .conftest import job_pods, pod_spec, vcjob

pytestmark = pytest.mark.cluster


def test_a_pod_asking_the_class_extended_resource_is_not_placed_by_volcano(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    spec = pod_spec(limits={"kubeacc.io/gpu": "2"})
    client.create(vcjob("ext", ns, [{"name": "w", "replicas": 1, "pod": spec}], 1))
    eventually(lambda: job_pods(client, ns, "ext"), 60, "the Job's pod")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        (pod,) = job_pods(client, ns, "ext")
        assert pod.spec and not pod.spec.nodeName, "Volcano placed an extended-resource pod"
        time.sleep(0.5)
    (pod,) = job_pods(client, ns, "ext")
    assert pod.status is not None
    # no claim was written for it: nothing reached kube-scheduler's DRA extended-resource path
    assert not pod.status.extendedResourceClaimStatus
    conditions = {c.type: c for c in pod.status.conditions or []}
    assert conditions["PodScheduled"].status == "False", conditions["PodScheduled"]
    assert pod.metadata and pod.metadata.name
    log = (stack.testbed.logs_dir / "vc-scheduler.log").read_text(errors="replace")
    assert f"Queue <default> is overused when considering task <{pod.metadata.name}>" in log
