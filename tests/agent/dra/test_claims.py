"""Which claim changes the claim watch reports (kubeacc.agent.dra.claims), by the comparison
itself; tests/agent/dra/test_claims_cluster.py runs the watch against the API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubeacc.agent.dra.claims import _same_beyond_status

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {
        "name": "train",
        "namespace": "ns",
        "uid": "u-1",
        "resourceVersion": "10",
        "managedFields": [{"manager": "kubectl"}],
        "annotations": {"a": "1"},
    },
    "spec": {"devices": {"requests": [{"name": "gpu"}]}},
    "status": {
        "allocation": {"devices": {"results": [{"device": "gpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "p"}],
        "devices": [{"driver": "gpu.kubeacc.io", "device": "gpu-0"}],
    },
}


def _changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(CLAIM)
    where = out
    for key in path[:-1]:
        where = where.setdefault(key, {})
    if value is None:
        where.pop(path[-1], None)
    else:
        where[path[-1]] = value
    return out


@pytest.mark.parametrize(
    "path, value",
    [
        (("metadata", "resourceVersion"), "11"),
        (("metadata", "managedFields"), [{"manager": "kubeacc"}]),
        (("metadata", "managedFields"), None),
        (("status", "devices"), []),
        (("status", "devices"), None),
    ],
)
def test_the_agents_own_write_is_no_change(path: tuple[str, ...], value: Any) -> None:
    assert _same_beyond_status(CLAIM, _changed(path, value))
    assert _same_beyond_status(_changed(path, value), CLAIM)


@pytest.mark.parametrize(
    "path, value",
    [
        (("metadata", "annotations"), {"a": "2"}),
        (("metadata", "annotations"), None),
        (("metadata", "labels"), {"x": "y"}),
        (("metadata", "deletionTimestamp"), "2026-11-27T00:00:00Z"),
        (("status", "reservedFor"), []),
        (("status", "reservedFor"), None),
        (("status", "allocation"), None),
        (("spec",), {}),
        (("spec",), None),
        (("extra",), 1),
    ],
)
def test_any_other_change_is_one(path: tuple[str, ...], value: Any) -> None:
    assert not _same_beyond_status(CLAIM, _changed(path, value))
    assert not _same_beyond_status(_changed(path, value), CLAIM)


def test_a_claim_without_metadata_or_status() -> None:
    assert _same_beyond_status({"spec": {}}, {"spec": {}, "status": {"devices": []}})
    assert not _same_beyond_status({"spec": {}}, {"spec": {}, "status": {"allocation": {}}})
