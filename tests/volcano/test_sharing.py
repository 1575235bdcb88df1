"""GPU memory sharing under a real Volcano, through DRA consumable capacity: the L4 of node
``h100-l4`` is published memory-shared (``kubeacc.io/memory``); a Volcano Job of two pods, each
claiming 10 GB of it, puts both on that one L4 as two shares with their limits in the
containers' environment; a third share does not fit and Volcano leaves its pod unbound.

(Volcano's own GPU sharing, ``deviceshare``, reads another project's device-plugin annotations;
kube-acc's device-plugin shares need ``kubeacc extender``'s decisions, which Volcano does not
ask for: DRA is the one path, docs/choosing.md, "With Volcano".)"""

from __future__ import annotations

import time
from typing import Any

import pytest
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from tests.agent.dra.test_sharing_e2e import cdi_env

from ..testbed.helpers import eventually
from .conftest import SHARED_L4, claim_template, job_pods, job_running, pod_claims, pod_spec, vcjob

pytestmark = pytest.mark.cluster

L4 = "gpu-" + SHARED_L4.replace(":", "-").replace(".", "-")
#: 10 GB of the synthetic L4's 23033 MiB: two fit, a third does not
SHARE = "10G"
SHARE_MIB = 9537
SHARE_SPEC: dict[str, Any] = {
    "devices": {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": "gpu.kubeacc.io",
                    "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
                    "capacity": {"requests": {"kubeacc.io/memory": SHARE}},
                },
            }
        ]
    }
}
CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "l4-share"}]


def _shared_entry(stack: KubeaccStack) -> bool:
    for s in stack.client().list(
        ResourceSlice, fields={"spec.nodeName": "h100-l4", "spec.driver": DRIVER_NAME}
    ):
        for d in as_dict(s)["spec"].get("devices") or []:
            if d["name"] == L4 and d.get("allowMultipleAllocations"):
                return True
    return False


def test_two_memory_shares_of_one_gpu_under_volcano_a_third_waits(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    eventually(lambda: _shared_entry(stack), 60, "the memory-shared L4 in h100-l4's slice")
    client.create(claim_template("l4-share", ns, SHARE_SPEC))
    task = {"name": "share", "replicas": 2, "pod": pod_spec(CLAIMS)}
    client.create(vcjob("shares", ns, [task], 2))

    eventually(lambda: job_running(client, ns, "shares", 2), 180, "both shares Running")
    share_ids = set()
    for pod in job_pods(client, ns, "shares"):
        assert pod.spec and pod.metadata and pod.metadata.name
        assert pod.spec.nodeName == "h100-l4"
        (claim,) = pod_claims(client, pod)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["device"] == L4
        assert result["consumedCapacity"]["kubeacc.io/memory"] == f"{SHARE_MIB}Mi"
        share_ids.add(result["shareID"])
        (record,) = stack.testbed.node("h100-l4").container_records(
            namespace=ns, pod=pod.metadata.name
        )
        env = cdi_env(stack.cdi_dir("h100-l4"), record)
        assert env["ACCELERATOR_UNITS"] == SHARED_L4
        assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == str(SHARE_MIB)
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={SHARE_MIB}M"
    assert len(share_ids) == 2

    # a third 10 GB share does not fit on the L4 (nor anywhere else: no other shared GPU)
    client.create(vcjob("third", ns, [{"name": "share", "replicas": 1, "pod": task["pod"]}], 1))
    eventually(lambda: job_pods(client, ns, "third"), 60, "the third share's pod")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        (pod,) = job_pods(client, ns, "third")
        assert not (pod.spec and pod.spec.nodeName), "a share that does not fit was bound"
        time.sleep(0.5)
