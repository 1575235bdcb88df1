"""``kubeacc plan`` against the live Volcano testbed: the pending pods of a Volcano gang get
their gang size and queue from the cluster's PodGroup (listed by the plan, not given in a
folder); a user whom RBAC lets read everything the plan needs except PodGroups gets the plan
with the reason the gang and queue are unknown, on stderr and in each pod's notes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.codecs import from_dict
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from typer.testing import CliRunner

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.cli.main import app
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.identities import cert_kubeconfig
from kubeacc.testbed.volcano import DEFAULT_QUEUE

from ..testbed.helpers import eventually
from .conftest import PodGroup, claim_template, job_pods, pod_spec, vcjob
from .test_gang import GANG, PAIR

pytestmark = pytest.mark.cluster

PLANNER = "planner"
#: one more pod than there are H100 pairs: Volcano never binds the gang
SIZE = GANG + 1
#: what ``kubeacc plan`` reads, and no PodGroups
READER_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices", "deviceclasses", "resourceclaims", "devicetaintrules"],
        "verbs": ["get", "list"],
    },
]


@pytest.fixture
def planner(kubeacc_volcano: KubeaccStack, tmp_path: Path) -> Iterator[Path]:
    """``planner``'s kubeconfig: reads the plan's inputs cluster-wide, not Volcano's objects."""
    client = kubeacc_volcano.client("kubeacc-test")
    client.create(
        from_dict(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "plan-reader"},
                "rules": READER_RULES,
            }
        )
    )
    client.create(
        from_dict(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "plan-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "plan-reader",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PLANNER}
                ],
            }
        )
    )
    try:
        yield cert_kubeconfig(kubeacc_volcano.testbed, tmp_path, PLANNER, ())
    finally:
        client.delete(ClusterRoleBinding, "plan-reader")
        client.delete(ClusterRole, "plan-reader")


def _plan(kubeconfig: Any, ns: str) -> tuple[dict[str, Any], str]:
    """The plan's placements of ``ns`` by claim (JSON), and its stderr."""
    res = CliRunner().invoke(app, ["plan", "--kubeconfig", str(kubeconfig), "-n", ns, "-o", "json"])
    # exit 1: the fifth pair does not fit beside the four planned before it
    assert res.exit_code in (0, 1) and res.stdout.startswith("["), (res.output, res.exception)
    return {o["claim"]: o for o in json.loads(res.stdout)}, res.stderr


def _claims_made(client: Any, ns: str) -> bool:
    pods = job_pods(client, ns, "big")
    return len(pods) == SIZE and all(
        p.status
        and p.status.resourceClaimStatuses
        and p.status.resourceClaimStatuses[0].resourceClaimName
        for p in pods
    )


def test_plan_reads_the_gang_and_queue_of_volcano_pods_from_the_cluster(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str, planner: Path
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    client.create(claim_template("h100-pair", ns, PAIR))
    claims = [{"name": "gpus", "resourceClaimTemplateName": "h100-pair"}]
    client.create(
        vcjob("big", ns, [{"name": "w", "replicas": SIZE, "pod": pod_spec(claims)}], SIZE)
    )
    (group,) = eventually(
        lambda: list(client.list(PodGroup, namespace=ns)), 60, "the Job's PodGroup"
    )
    name = as_dict(group)["metadata"]["name"]
    eventually(lambda: _claims_made(client, ns), 60, "the gang's pods and their claims")

    # the admin: the PodGroup's size and queue, though no folder gave them
    placed, err = _plan(stack.testbed.kubeconfig, ns)
    assert len(placed) == SIZE, placed
    for p in placed.values():
        assert p["scheduler"]["name"] == "volcano"
        said = "\n".join(p["scheduler"]["notPredicted"])
        assert f"gang {ns}/{name}: bound together with its {SIZE} members" in said, said
        assert f"queue {DEFAULT_QUEUE}:" in said, said
    assert "unknown" not in err

    # a reader without PodGroups: the plan still runs, and says why the gang is unknown
    placed, err = _plan(planner, ns)
    why = f"not allowed to list PodGroups (scheduling.volcano.sh/v1beta1) in namespace {ns}"
    assert why in err, err
    assert len(placed) == SIZE, placed
    for p in placed.values():
        said = "\n".join(p["scheduler"]["notPredicted"])
        assert f"its minMember pods (its PodGroup unknown: {why}" in said, said
        assert f"its {SIZE} members" not in said
