"""``kubeacc plan --add-node`` answers a capacity question as kube-scheduler does once such a
node really joins: planned against the live testbed before the node has any device, then the
node gets that host (the agent on the synthetic profile) and the real scheduler decides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.synthetic import profiles
from kubeacc.testbed.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.cli.clirun import kubeacc
from tests.cli.test_planfix_cluster import H100, claim_and_pod
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def _claim_and_pod(client: Client, namespace: str, name: str, count: int) -> None:
    claim_and_pod(client, namespace, name, count, (H100,))


def test_add_node_answers_as_kube_scheduler_once_the_node_joins(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    kc, home = str(testbed.kubeconfig), tmp_path / "home"
    home.mkdir()
    assert kubeacc("install-classes", "--kubeconfig", kc, home=home).returncode == 0
    _claim_and_pod(kube_client, namespace, "two-h100", 2)
    _claim_and_pod(kube_client, namespace, "three-h100", 3)

    # The question, asked before any node has such GPUs.
    base = ("plan", "--kubeconfig", kc, "-n", namespace, "-o", "json")
    alone = kubeacc(*base, home=home)
    assert alone.returncode == 1 and not any(p["allocated"] for p in json.loads(alone.stdout))
    asked = kubeacc(*base, "--add-node", "h100-l4:joining", home=home)
    verdict: dict[str, Any] = {p["claim"]: p for p in json.loads(asked.stdout)}
    two, three = verdict[f"{namespace}/two-h100"], verdict[f"{namespace}/three-h100"]
    assert two["allocated"] and two["node"] == "joining", asked.stdout
    planned = sorted(r["device"] for r in two["allocation"]["devices"]["results"])
    assert not three["allocated"]

    # The node joins with that host: the agent publishes it, kube-scheduler decides.
    node = testbed.node_name
    host = profiles.build("h100-l4", tmp_path / "host")
    agent = AgentProcess(node, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path)
    agent.start()
    try:
        agent.wait_registered()

        def allocation() -> Any:
            got = kube_client.get(ResourceClaim, "two-h100", namespace=namespace)
            return got.status.allocation if got.status else None

        alloc = eventually(allocation, 90, "two-h100 allocated by kube-scheduler", agent.log)
        results = alloc.devices.results
        assert sorted(r.device for r in results) == planned
        assert {r.pool for r in results} == {node}

        def unschedulable() -> str | None:
            pod = kube_client.get(Pod, "three-h100", namespace=namespace)
            for c in (pod.status and pod.status.conditions) or []:
                if c.type == "PodScheduled" and c.status == "False" and c.message:
                    # a verdict reached with the node's slices in view
                    return c.message if "cannot allocate" in c.message else None
            return None

        eventually(unschedulable, 60, "three-h100 unschedulable", agent.log)
        claim = kube_client.get(ResourceClaim, "three-h100", namespace=namespace)
        assert not (claim.status and claim.status.allocation)
    finally:
        for name in ("two-h100", "three-h100"):
            kube_client.delete(Pod, name, namespace=namespace, grace_period=0)
        agent.stop()
