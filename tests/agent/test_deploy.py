"""The deploy/ manifests: accepted by the real API server, and the DaemonSet's service account
confined to its own node through the node name in its pod-bound token."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod

from kubeacc.crds.deploy import DEPLOY, apply_manifest
from kubeacc.testbed.testbed import Testbed
from tests.testbed.helpers import eventually, eventually_refused

pytestmark = pytest.mark.cluster
SA_NS = "kube-system"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_workload_manifests_are_accepted(kube_client: Client) -> None:
    for name in ("agent.yaml", "controller.yaml"):
        for doc in _docs(name):
            # Server-side validation against the real schemas, nothing created.
            kube_client.create(from_dict(doc), dry_run=True)


def _slice(name: str, node: str) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": "kubeacc.io",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0000-3b-00-0"}],
            },
        }
    )


def _token_client(testbed: Testbed, tmp: Path, *bound: str) -> Client:
    token = subprocess.run(
        [*testbed.kubectl(), "create", "token", "kubeacc-agent", "-n", SA_NS, *bound],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    pki = testbed.control_plane.pki
    assert pki is not None
    kc = tmp / f"sa-{len(bound)}.kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "tb",
                        "cluster": {
                            "server": testbed.server,
                            "certificate-authority": str(pki.ca.cert_path),
                        },
                    }
                ],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "tb", "user": "sa"}}],
                "current-context": "sa",
            }
        )
    )
    return Client(KubeConfig.from_file(kc), field_manager="kubeacc-agent")


def test_daemonset_identity_writes_only_its_nodes_slices(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    from lightkube.resources.resource_v1 import ResourceSlice

    apply_manifest(kube_client, "rbac/agent.yaml")
    apply_manifest(kube_client, "admission/agent-node-restriction.yaml")
    for doc in _docs("agent.yaml"):
        if doc["kind"] == "ServiceAccount":
            kube_client.apply(from_dict(doc), field_manager="kubeacc", force=True)
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
        bound = _token_client(
            testbed, tmp_path, "--bound-object-kind=Pod", "--bound-object-name=kubeacc-agent-test"
        )
        # Dry runs until the updated policy is loaded (admission runs on dry runs too).
        eventually_refused(lambda: bound.create(_slice("sa-node-b", "node-b"), dry_run=True))
        msg = eventually_refused(lambda: bound.create(_slice("sa-node-b", "node-b")), timeout=0)
        assert f"node agent {testbed.node_name} may only write kubeacc.io ResourceSlices" in msg
        bound.create(_slice("sa-own", testbed.node_name))
        bound.delete(ResourceSlice, "sa-own")
        unbound = _token_client(testbed, tmp_path)
        msg = eventually_refused(
            lambda: unbound.create(_slice("sa-any", testbed.node_name), dry_run=True), timeout=0
        )
        assert "may only write kubeacc.io ResourceSlices" in msg
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
