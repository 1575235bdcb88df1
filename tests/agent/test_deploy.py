"""The deploy/ manifests: accepted by the real API server, and the DaemonSet's service account
confined to its own node through the node name in its pod-bound token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod

from kubeacc.crds.deploy import DEPLOY
from kubeacc.testbed.identities import install_agent_access, token_client
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import resource_slice
from tests.testbed.helpers import eventually, eventually_refused

pytestmark = pytest.mark.cluster
SA_NS = "kube-system"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_workload_manifests_are_accepted(kube_client: Client) -> None:
    for name in ("agent.yaml", "controller.yaml", "extender.yaml"):
        for doc in _docs(name):
            # Server-side validation against the real schemas, nothing written (an apply: other
            # tests may have created the service account already).
            kube_client.apply(from_dict(doc), force=True, dry_run=True)


def test_daemonset_identity_writes_only_its_nodes_slices(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    from lightkube.resources.resource_v1 import ResourceSlice

    install_agent_access(kube_client)
    pod = from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kubeacc-agent-test", "namespace": SA_NS},
            "spec": {
                "nodeName": testbed.node_name,
                "serviceAccountName": "kubeacc-agent",
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
    )
    kube_client.create(pod)
    try:
        bound = token_client(testbed, tmp_path, bound_kind="Pod", bound_name="kubeacc-agent-test")
        # Dry runs until the updated policy is loaded (admission runs on dry runs too).
        eventually_refused(
            lambda: bound.create(resource_slice("sa-node-b", "node-b"), dry_run=True)
        )
        msg = eventually_refused(
            lambda: bound.create(resource_slice("sa-node-b", "node-b")), timeout=0
        )
        assert f"node agent {testbed.node_name} may only write kubeacc.io ResourceSlices" in msg
        own = f"{testbed.node_name}-kubeacc.io-0"
        bound.create(resource_slice(own, testbed.node_name))
        bound.delete(ResourceSlice, own)
        unbound = token_client(testbed, tmp_path)
        msg = eventually_refused(
            lambda: unbound.create(resource_slice(own, testbed.node_name), dry_run=True), timeout=0
        )
        assert "system:serviceaccount:kube-system:kubeacc-agent is a kubeacc node agent" in msg
        assert "without a node binding" in msg
    finally:
        kube_client.delete(Pod, "kubeacc-agent-test", namespace=SA_NS, grace_period=0)
        eventually(
            lambda: (
                "kubeacc-agent-test"
                not in {p.metadata.name for p in kube_client.list(Pod, namespace=SA_NS)}
            ),
            60,
            "test pod gone",
        )
