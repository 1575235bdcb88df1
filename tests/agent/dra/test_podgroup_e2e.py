"""A claim shared by a pod group (Kubernetes 1.37 workload claims, ``DRAWorkloadResourceClaims``
beta and ``GenericWorkload``, both off by default and turned on here, with the
``scheduling.k8s.io/v1beta1`` API): kube-scheduler reserves it for the PodGroup, not for each
pod; the real kubelet prepares it once for the group's pods on the node and unprepares it when
the last of them goes; and ``kubeacc uninstall-check`` counts the group as a user in the meantime
(its pods are not named in the claim)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.crds.resources import as_dict
from kubeacc.synthetic import profiles
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.versions import FEATURE_GATES
from tests.cli.clirun import kubeacc

from ...nodestack import claim, claim_pod
from ...testbed.helpers import eventually
from .agentproc import AgentProcess
from .test_sharing_e2e import running

pytestmark = pytest.mark.cluster

NODE = "gang-a"
NS = "gang"
ON = dict.fromkeys(("GenericWorkload", "DRAWorkloadResourceClaims"), True)


@pytest.fixture(scope="module")
def gang_cluster() -> Iterator[Testbed]:
    kubelet = KubeletOptions(node_name=NODE)
    kubelet.feature_gates.update(ON)
    tb = Testbed.start(
        nodes=[kubelet], feature_gates={**FEATURE_GATES, **ON}, apis=("scheduling.k8s.io/v1beta1",)
    )
    try:
        yield tb
    finally:
        tb.stop()


def _member(name: str) -> Pod:
    pod = as_dict(claim_pod(name, NS, "shared"))
    pod["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
    return from_dict(pod)  # type: ignore[no-any-return]


def test_a_pod_groups_claim_is_prepared_once_and_released_with_the_last_pod(
    gang_cluster: Testbed, tmp_path: Path
) -> None:
    tb = gang_cluster
    client: Client = tb.client(field_manager="kubeacc-test")
    agent = AgentProcess(
        NODE,
        profiles.build("l4-pair", tmp_path / "host"),
        tb.kubeconfig,
        tb.node(NODE).root_dir,
        tmp_path,
    )
    agent.start()
    try:
        agent.wait_registered(90)
        client.create(Namespace.from_dict({"metadata": {"name": NS}}))
        tb.wait_service_account(NS)
        client.create(claim("shared", NS, "gpu.kubeacc.io"))
        group = {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": NS},
            "spec": {
                "schedulingPolicy": {"basic": {}},
                # as each pod names it: the same name and claim
                "resourceClaims": [{"name": "acc", "resourceClaimName": "shared"}],
            },
        }
        client.create(from_dict(group))
        for name in ("first", "second"):
            client.create(_member(name))
        for name in ("first", "second"):
            eventually(lambda n=name: running(client, n, NS), 90, f"{name} Running", agent.log)

        got = as_dict(client.get(ResourceClaim, "shared", namespace=NS))
        uid = got["metadata"]["uid"]
        (reserved,) = got["status"]["reservedFor"]
        assert (reserved["apiGroup"], reserved["resource"], reserved["name"]) == (
            "scheduling.k8s.io",
            "podgroups",
            "gang",
        )
        assert list(agent.checkpoint_claims()) == [uid]  # one claim for both pods

        home = tmp_path / "home"
        home.mkdir()
        check = kubeacc("uninstall-check", "--kubeconfig", str(tb.kubeconfig), home=home)
        assert check.returncode == 1, check.stdout + check.stderr
        assert f"claim {NS}/shared: pods {NS}/gang (pod group)" in check.stdout

        # One member goes: the other still runs on the claim, so it stays prepared.
        client.delete(Pod, "first", namespace=NS, grace_period=0)
        eventually(
            lambda: not [p for p in client.list(Pod, namespace=NS) if p.metadata.name == "first"],
            90,
            "first deleted",
        )
        time.sleep(5)
        assert list(agent.checkpoint_claims()) == [uid]
        assert running(client, "second", NS)
        # The last one goes: the kubelet unprepares.
        client.delete(Pod, "second", namespace=NS, grace_period=0)
        eventually(lambda: not agent.checkpoint_claims(), 90, "unprepared", log=agent.log)
    finally:
        agent.stop()
