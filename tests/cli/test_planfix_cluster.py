"""``kubeacc plan --fixes`` on the live testbed: the changes it finds are the ones kube-scheduler
agrees with once they are made (a relaxed copy of a claim is allocated; freeing the claim it
names lets the waiting pod's claim be allocated)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.synthetic import profiles
from kubeacc.testbed.testbed import Testbed
from tests.agent.dra.agentproc import registered_agent
from tests.cli.clirun import kubeacc
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster
H100 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")'


def claim_and_pod(
    client: Client, namespace: str, name: str, count: int, selectors: tuple[str, ...] = ()
) -> None:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.kubeacc.io", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceClaims": [{"name": "c", "resourceClaimName": name}],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "c"}]}}],
        },
    }
    client.create(from_dict(claim))
    client.create(from_dict(pod))


def _allocation(client: Client, namespace: str, name: str) -> Any:
    got = client.get(ResourceClaim, name, namespace=namespace)
    return got.status.allocation if got.status else None


def _delete(client: Client, namespace: str, name: str) -> None:
    """The pod, then its claim, and wait until the claim is gone (its devices free)."""
    client.delete(Pod, name, namespace=namespace, grace_period=0)
    client.delete(ResourceClaim, name, namespace=namespace)

    def gone() -> bool | None:
        try:
            client.get(ResourceClaim, name, namespace=namespace)
        except ApiError as err:
            return True if err.status.code == 404 else None
        return None

    eventually(gone, 90, f"claim {name} deleted")


def test_fixes_found_by_plan_are_what_kube_scheduler_does(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    kc, home = str(testbed.kubeconfig), tmp_path / "home"
    home.mkdir()
    assert kubeacc("install-classes", "--kubeconfig", kc, home=home).returncode == 0
    host = profiles.build("l4-pair", tmp_path / "host")  # two L4s
    with registered_agent(testbed, host, tmp_path) as agent:
        claim_and_pod(kube_client, namespace, "holder", 1)
        eventually(lambda: _allocation(kube_client, namespace, "holder"), 90, "holder", agent.log)
        claim_and_pod(kube_client, namespace, "two", 2)
        claim_and_pod(kube_client, namespace, "h100", 1, (H100,))

        res = kubeacc(
            "plan", "--kubeconfig", kc, "-n", namespace, "--fixes", "-o", "json", home=home
        )
        assert res.returncode == 1, res.stdout + res.stderr
        verdict = {p["claim"]: p for p in json.loads(res.stdout)}
        two = verdict[f"{namespace}/two"]["fixes"]["found"]
        h100 = verdict[f"{namespace}/h100"]["fixes"]["found"]
        assert two[0] == {
            "change": "free",
            "claims": [f"{namespace}/holder"],
            "pods": [f"{namespace}/holder"],
            "devices": 1,
        }
        assert [f for f in two if f["change"] == "relax"] == [
            {
                "change": "relax",
                "claim": f"{namespace}/two",
                "path": "spec.devices.requests[0].exactly.count",
                "count": 2,
                "fits": 1,
            }
        ]
        assert h100[0] == {
            "change": "relax",
            "claim": f"{namespace}/h100",
            "path": "spec.devices.requests[0].exactly.selectors[0]",
            "dropped": H100,
        }
        assert [f for f in h100 if f["change"] == "free"] == []  # the held GPU is an L4 too
        assert any(f["change"] == "add-node" for f in two + h100)

        # The relaxed claim: kube-scheduler allocates it (the L4 the holder leaves).
        claim_and_pod(kube_client, namespace, "h100-relaxed", 1)
        eventually(
            lambda: _allocation(kube_client, namespace, "h100-relaxed"), 90, "relaxed", agent.log
        )
        _delete(kube_client, namespace, "h100-relaxed")
        # The lowered count: kube-scheduler allocates one GPU where two did not fit.
        claim_and_pod(kube_client, namespace, "two-lowered", 1)
        eventually(
            lambda: _allocation(kube_client, namespace, "two-lowered"), 90, "lowered", agent.log
        )
        _delete(kube_client, namespace, "two-lowered")
        assert _allocation(kube_client, namespace, "two") is None

        # Freeing the claim named: kube-scheduler then allocates "two" on its own.
        _delete(kube_client, namespace, "holder")
        alloc = eventually(
            lambda: _allocation(kube_client, namespace, "two"), 120, "two allocated", agent.log
        )
        assert len(alloc.devices.results) == 2
        for name in ("two", "h100"):
            kube_client.delete(Pod, name, namespace=namespace, grace_period=0)
