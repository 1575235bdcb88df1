"""Which claims of kube-acc's driver are in use (the chart's pre-delete uninstall check)."""

from __future__ import annotations

from typing import Any

from kubeacc.agent.inuse import InUse, claims_in_use


def _claim(name: str, driver: str, pods: list[str], ns: str = "work") -> dict[str, Any]:
    results = [{"request": "r", "driver": driver, "pool": "n", "device": "d"}]
    return {
        "metadata": {"name": name, "namespace": ns},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": p} for p in pods],
        },
    }


def test_only_reserved_claims_of_kubeacc_count() -> None:
    claims = [
        _claim("b", "kubeacc.io", ["app-1", "app-2"]),
        _claim("idle", "kubeacc.io", []),  # allocated, no pod: nothing to unprepare
        _claim("other", "gpu.example.com", ["x"]),  # another driver's
        {"metadata": {"name": "pending", "namespace": "work"}},  # not allocated
        _claim("a", "kubeacc.io", ["solo"], ns="ml"),
    ]
    assert claims_in_use(claims) == [
        InUse("ml/a", ("ml/solo",)),
        InUse("work/b", ("work/app-1", "work/app-2")),
    ]
    assert claims_in_use(claims)[1].line() == "claim work/b: pods work/app-1, work/app-2"


def test_a_claim_reserved_for_a_pod_group_is_in_use() -> None:
    """Kubernetes 1.37 workload claims: the reservation names the pod group, not its pods; the
    kubelet still needs the driver to unprepare when the group's last pod goes."""
    gang = _claim("shared", "kubeacc.io", [])
    gang["status"]["reservedFor"] = [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "gang", "uid": "g"}
    ]
    (used,) = claims_in_use([gang])
    assert used.line() == "claim work/shared: pods work/gang (pod group)"
